package computedomain

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"

	cdv1beta1 "cdplane/api/v1beta1"
)

// statusWrites runs each domain's status write apart from its passes, when membership lives in
// cliques. A daemon waits for its clique, never for the domain's status; but a status of
// thousands of entries takes seconds to apply on a busy apiserver, and a pass that waited for it
// held every next clique write (every joining daemon) behind it: in a burst of joins the status
// apply was the larger part of each pass. Now a pass writes its cliques and hands the status
// over; the next pass can begin while the status is written.
//
// At most one status write runs per domain, so writes land in the order they were computed. A
// pass that computes a status while one is being written does not start another: it marks the
// domain, and when the running write ends the domain is reconciled again (again), so that the
// newest status is written from what the previous write left. A status that changes what the
// domain says as a whole (Ready, NotReady) is not left to that pass: it is written as soon as
// the running write ends (statusRun.next). A failed write reconciles the domain again with the
// controller's backoff (failed).
//
// After each write a domain's status rests for as long as that write took: a pass in that time
// whose status says the same of the domain as a whole (status.status) starts no write, and the
// domain is reconciled again when the rest ends. A burst of joins changes the status in every
// pass; a status of thousands of entries costs the apiserver far more than a clique write, and
// back to back these few writes held as many of its seats as all the cliques' writes (see
// docs/scale.md, "Design choices and what was measured"). With the rest they take at most half
// the time, and the write that makes a domain Ready (or NotReady) never waits for one. A small
// status is written in milliseconds and rests as long.
type statusWrites struct {
	mu      sync.Mutex
	running map[types.NamespacedName]*statusRun
	// rests holds each domain's last background write: until when its status rests, what it
	// wrote of the domain as a whole, and whether a pass is already due at the end of the rest.
	// Entries past their rest are dropped as new ones come (sweepAt).
	rests   map[types.NamespacedName]*statusRest
	sweepAt int
	// now and afterFunc are time.Now and time.AfterFunc unless a test sets them.
	now       func() time.Time
	afterFunc func(time.Duration, func())
	// again and failed carry the domains to reconcile again; read by the controller's channel
	// sources (see SetupWithManager). Unset (a reconciler used without a manager): statuses are
	// written within the pass.
	again, failed chan event.TypedGenericEvent[*cdv1beta1.ComputeDomain]
	// ended, when set (tests), is called when a background write is done with, its domain
	// sent back or not.
	ended func()
}

type statusRun struct {
	// status is the status being written; newer: a pass computed a different one meanwhile.
	status cdv1beta1.ComputeDomainStatus
	newer  bool
	// next writes nextStatus as soon as this write ends, without waiting for a pass: set when
	// a pass computed a status that changes what the domain says as a whole (status.status),
	// then replaced by each later pass's.
	next       func(context.Context) error
	nextStatus cdv1beta1.ComputeDomainStatus
}

// statusRest is what a domain's last background status write left (see statusWrites).
type statusRest struct {
	until  time.Time
	status string
	due    bool
}

// minSweep is the fewest rests kept before those past their end are swept.
const minSweep = 16

func newStatusWrites() *statusWrites {
	return &statusWrites{
		running: map[types.NamespacedName]*statusRun{}, rests: map[types.NamespacedName]*statusRest{}, sweepAt: minSweep,
		now: time.Now, afterFunc: func(d time.Duration, f func()) { time.AfterFunc(d, f) },
	}
}

// wire makes the channels the controller reads; before it, write runs within the pass.
func (s *statusWrites) wire() {
	s.again = make(chan event.TypedGenericEvent[*cdv1beta1.ComputeDomain], 64)
	s.failed = make(chan event.TypedGenericEvent[*cdv1beta1.ComputeDomain], 64)
}

// write runs w, which writes st for the domain key, in the background; or, while another write
// runs for key, marks it to be followed by another pass unless it writes st too; or, while the
// domain's status rests and st says the same of it as a whole, has it reconciled again when the
// rest ends. It returns w's
// error when it ran within the call (not wired), else nil. ctx is the controller's (no
// reconciliation timeout is set): it outlives the pass and ends with the controller.
func (s *statusWrites) write(ctx context.Context, key types.NamespacedName, st cdv1beta1.ComputeDomainStatus, w func(context.Context) error) error {
	if s.again == nil {
		return w(ctx)
	}
	s.mu.Lock()
	if run := s.running[key]; run != nil {
		switch {
		case run.next != nil || st.Status != run.status.Status:
			// The domain turns Ready (or NotReady), or did in an earlier pass: written as soon
			// as the running write ends, newest first, rather than after one more pass (which
			// may rest: see passRests).
			run.next, run.nextStatus = w, st
		case !equality.Semantic.DeepEqual(run.status, st):
			run.newer = true
		}
		s.mu.Unlock()
		return nil
	}
	now := s.now()
	if rest := s.rests[key]; rest != nil && now.Before(rest.until) && rest.status == st.Status {
		// Also when st is what was written: the pass may have come for a status changed by
		// someone else meanwhile, which the pass after the rest writes back.
		if !rest.due {
			rest.due = true
			s.afterFunc(rest.until.Sub(now), func() { s.send(ctx, s.again, key) })
		}
		s.mu.Unlock()
		return nil
	}
	delete(s.rests, key)
	s.running[key] = &statusRun{status: st}
	s.mu.Unlock()
	go func() {
		if s.ended != nil {
			defer s.ended()
		}
		err := w(ctx)
		end := s.now()
		s.mu.Lock()
		for run := s.running[key]; err == nil && run.next != nil; run = s.running[key] {
			// Newer than anything a pass marked before it: the mark goes with it.
			w, st, now = run.next, run.nextStatus, end
			run.status, run.next, run.newer = st, nil, false
			s.mu.Unlock()
			err = w(ctx)
			end = s.now()
			s.mu.Lock()
		}
		newer := s.running[key].newer
		delete(s.running, key)
		if err == nil {
			s.rested(key, &statusRest{until: end.Add(end.Sub(now)), status: st.Status}, end)
		}
		s.mu.Unlock()
		to := s.again
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Writing status")
			to = s.failed
		} else if !newer {
			return
		}
		s.send(ctx, to, key)
	}()
	return nil
}

// rested records the rest after a write of key's status, first sweeping the rests that ended
// before now when the map has grown to twice what the last sweep left (at least minSweep).
// Callers hold s.mu.
func (s *statusWrites) rested(key types.NamespacedName, rest *statusRest, now time.Time) {
	if len(s.rests) >= s.sweepAt {
		for k, r := range s.rests {
			if !r.until.After(now) && !r.due {
				delete(s.rests, k)
			}
		}
		s.sweepAt = max(2*len(s.rests), minSweep)
	}
	s.rests[key] = rest
}

// send hands the domain key back to the controller on ch, unless ctx ended.
func (s *statusWrites) send(ctx context.Context, ch chan event.TypedGenericEvent[*cdv1beta1.ComputeDomain], key types.NamespacedName) {
	if ch == s.again {
		s.mu.Lock()
		if rest := s.rests[key]; rest != nil {
			rest.due = false
		}
		s.mu.Unlock()
	}
	ev := event.TypedGenericEvent[*cdv1beta1.ComputeDomain]{Object: &cdv1beta1.ComputeDomain{}}
	ev.Object.Namespace, ev.Object.Name = key.Namespace, key.Name
	select {
	case ch <- ev:
	case <-ctx.Done():
	}
}
