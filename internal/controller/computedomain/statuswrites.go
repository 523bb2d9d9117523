package computedomain

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"

	cdv1beta1 "cdplane/api/v1beta1"
)

// statusWrites runs each domain's status write apart from its passes, when membership lives in
// cliques. A daemon waits for its clique, never for the domain's status; but a status of
// thousands of entries takes seconds to apply on a busy apiserver, and a pass that waited for it
// held every next clique write (every joining daemon) behind it: in a burst of 2,304 joins the
// status apply was the longer half of each pass. Now a pass writes its cliques and hands the
// status over; the next pass can begin while the status is written.
//
// At most one status write runs per domain, so writes land in the order they were computed. A
// pass that computes a status while one is being written does not start another: it marks the
// domain, and when the running write ends the domain is reconciled again (again), so that the
// newest status is written from what the previous write left. A failed write reconciles the
// domain again with the controller's backoff (failed).
type statusWrites struct {
	mu      sync.Mutex
	running map[types.NamespacedName]*statusRun
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
}

func newStatusWrites() *statusWrites {
	return &statusWrites{running: map[types.NamespacedName]*statusRun{}}
}

// wire makes the channels the controller reads; before it, write runs within the pass.
func (s *statusWrites) wire() {
	s.again = make(chan event.TypedGenericEvent[*cdv1beta1.ComputeDomain], 64)
	s.failed = make(chan event.TypedGenericEvent[*cdv1beta1.ComputeDomain], 64)
}

// write runs w, which writes st for the domain key, in the background; or, while another write
// runs for key, marks it to be followed by another pass unless it writes st too. It returns w's
// error when it ran within the call (not wired), else nil. ctx is the controller's (no
// reconciliation timeout is set): it outlives the pass and ends with the controller.
func (s *statusWrites) write(ctx context.Context, key types.NamespacedName, st cdv1beta1.ComputeDomainStatus, w func(context.Context) error) error {
	if s.again == nil {
		return w(ctx)
	}
	s.mu.Lock()
	if run := s.running[key]; run != nil {
		if !equality.Semantic.DeepEqual(run.status, st) {
			run.newer = true
		}
		s.mu.Unlock()
		return nil
	}
	s.running[key] = &statusRun{status: st}
	s.mu.Unlock()
	go func() {
		if s.ended != nil {
			defer s.ended()
		}
		err := w(ctx)
		s.mu.Lock()
		newer := s.running[key].newer
		delete(s.running, key)
		s.mu.Unlock()
		to := s.again
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Writing status", "computeDomain", key)
			to = s.failed
		} else if !newer {
			return
		}
		ev := event.TypedGenericEvent[*cdv1beta1.ComputeDomain]{Object: &cdv1beta1.ComputeDomain{}}
		ev.Object.Namespace, ev.Object.Name = key.Namespace, key.Name
		select {
		case to <- ev:
		case <-ctx.Done():
		}
	}()
	return nil
}
