package computedomain

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/membership"
	"cdplane/internal/metrics"
)

// The controller's domain metrics (internal/metrics):
//   - cdplane_computedomains and cdplane_computedomains_oldest_not_ready_timestamp_seconds come
//     from domainStates, which an event handler on the manager's ComputeDomain informer keeps,
//     on every replica (the standby's cache holds the same domains): the plane's domains as the
//     cache holds them, a deleted domain gone with its delete event.
//   - cdplane_node_join_to_ready_seconds comes from joins, which Reconcile feeds after each
//     status write (observeJoins) with the membership it computed.

// joins is the process's join tracker: domain UIDs are unique, so the reconcilers of every
// manager in the process (tests run several) share it.
var joins = newJoinTracker()

// observeJoins observes in NodeJoinToReady the join-to-Ready time of each entry of res that is
// Ready for the first time since it joined. Reconcile calls it after the status write.
func (r *Reconciler) observeJoins(cd *cdv1beta1.ComputeDomain, res membership.Result) {
	for _, d := range joins.observe(cd.UID, res.All(), time.Now()) {
		metrics.NodeJoinToReady.WithLabelValues(r.opts.ControlPlaneID).Observe(d.Seconds())
	}
}

// stepTimer times the steps of one reconcile into metrics.ReconcileStep.
func (r *Reconciler) stepTimer() *stepTimer {
	return &stepTimer{planeID: r.opts.ControlPlaneID, last: time.Now()}
}

type stepTimer struct {
	planeID string
	last    time.Time
}

// since observes the time since the previous step ended as step's, for steps that run at the
// same time as others: it does not end a step. It returns the time it observed at.
func (t *stepTimer) since(step string) time.Time {
	now := time.Now()
	metrics.ReconcileStep.WithLabelValues(t.planeID, step).Observe(now.Sub(t.last).Seconds())
	return now
}

// done observes the time since the previous step ended (or the timer was made) as step's, and
// ends the step.
func (t *stepTimer) done(step string) { t.last = t.since(step) }

// joinTracker remembers, per domain UID and node, when the controller first saw the node's
// entry and whether its join was observed. It lives in memory only: after a restart (or a
// failover) the entries present at a domain's first reconcile are not measured, as their join
// began before this process saw them; only later joins are.
type joinTracker struct {
	mu      sync.Mutex
	domains map[types.UID]map[string]joinState
}

type joinState struct {
	// since is when the entry was first seen.
	since time.Time
	// done: the join was observed, or began before the tracker saw the domain.
	done bool
}

func newJoinTracker() *joinTracker {
	return &joinTracker{domains: map[types.UID]map[string]joinState{}}
}

// observe records the domain's entries at now and returns, for each entry Ready for the first
// time since it joined, how long it took. An entry no longer listed is forgotten (a node that
// leaves and joins again is measured again). At the domain's first observation every entry is
// taken as joined before: none is measured.
func (t *joinTracker) observe(uid types.UID, entries []membership.Entry, now time.Time) []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	known, seen := t.domains[uid]
	next := make(map[string]joinState, len(entries))
	var out []time.Duration
	for _, e := range entries {
		s, ok := known[e.NodeName]
		switch {
		case !seen:
			s = joinState{since: now, done: true}
		case !ok:
			s = joinState{since: now}
		}
		if !s.done && e.Status == cdv1beta1.StatusReady {
			out = append(out, now.Sub(s.since))
			s.done = true
		}
		next[e.NodeName] = s
	}
	t.domains[uid] = next
	return out
}

// forget drops what is remembered of a domain (deleted, or no longer the plane's).
func (t *joinTracker) forget(uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.domains, uid)
}

// domainStates holds the status of each domain of one manager's cache, by UID.
type domainStates struct {
	mu    sync.Mutex
	byUID map[types.UID]domainState
}

type domainState struct {
	ready bool
	// notReadySince is when a NotReady domain became so.
	notReadySince time.Time
}

func newDomainStates() *domainStates {
	return &domainStates{byUID: map[types.UID]domainState{}}
}

// stateOf is a domain's state: Ready when status.status says so; otherwise NotReady (a domain
// not reported on yet included) since its Ready condition last turned False, or, without one,
// since its creation.
func stateOf(cd *cdv1beta1.ComputeDomain) domainState {
	if cd.Status.Status == cdv1beta1.StatusReady {
		return domainState{ready: true}
	}
	since := cd.CreationTimestamp.Time
	if c := meta.FindStatusCondition(cd.Status.Conditions, cdv1beta1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue && !c.LastTransitionTime.IsZero() {
		since = c.LastTransitionTime.Time
	}
	return domainState{notReadySince: since}
}

func (s *domainStates) set(cd *cdv1beta1.ComputeDomain) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byUID[cd.UID] = stateOf(cd)
}

func (s *domainStates) delete(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byUID, uid)
}

// counts is the source of the plane's domain series.
func (s *domainStates) counts() metrics.DomainCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n metrics.DomainCounts
	for _, st := range s.byUID {
		if st.ready {
			n.Ready++
			continue
		}
		n.NotReady++
		if n.OldestNotReady.IsZero() || st.notReadySince.Before(n.OldestNotReady) {
			n.OldestNotReady = st.notReadySince
		}
	}
	return n
}

// handler keeps s (and joins, on deletion) up to date from the ComputeDomain informer.
func (s *domainStates) handler() toolscache.ResourceEventHandler {
	set := func(obj any) {
		if cd, ok := obj.(*cdv1beta1.ComputeDomain); ok {
			s.set(cd)
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if cd, ok := obj.(*cdv1beta1.ComputeDomain); ok {
				s.delete(cd.UID)
				joins.forget(cd.UID)
			}
		},
	}
}

// AddMetrics adds to mgr what feeds the plane's domain series: an event handler on its
// ComputeDomain informer, on every replica (not only the leader), from the moment the caches
// have synced until the manager stops; the series of a stopped manager are gone.
func AddMetrics(mgr ctrl.Manager, planeID string) error {
	return mgr.Add(&domainMetrics{cache: mgr.GetCache(), planeID: planeID})
}

type domainMetrics struct {
	cache   cache.Cache
	planeID string
}

// NeedLeaderElection is false: a standby replica exports the domains too.
func (*domainMetrics) NeedLeaderElection() bool { return false }

func (m *domainMetrics) Start(ctx context.Context) error {
	inf, err := m.cache.GetInformer(ctx, &cdv1beta1.ComputeDomain{})
	if err != nil {
		return fmt.Errorf("getting the ComputeDomain informer for the domain metrics: %w", err)
	}
	states := newDomainStates()
	reg, err := inf.AddEventHandler(states.handler())
	if err != nil {
		return fmt.Errorf("watching ComputeDomains for the domain metrics: %w", err)
	}
	remove := metrics.ComputeDomains.Add(m.planeID, states.counts)
	<-ctx.Done()
	remove()
	// The informer stops with the manager; a handler it cannot remove any more is gone with it.
	_ = inf.RemoveEventHandler(reg)
	return nil
}
