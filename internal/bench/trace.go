package bench

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
)

// Phases of one instance's registration, in the order they happen; each is the time from the
// instance's start to the first success of that step.
const (
	phaseRunning   = "pod_running"  // the kubelet's first status patch (pod IP)
	phaseLabel     = "label"        // the daemon's one write: the clique label on its pod
	phaseList      = "list"         // the daemon's first successful list (its informer's)
	phaseWatch     = "watch"        // the daemon's first watch opened
	phaseSeen      = "seen"         // the controller's cache first showed the pod labelled
	phaseWritten   = "written"      // the controller's write of a clique naming the node returned
	phaseClique    = "in_clique"    // the daemon first read its clique listing its node
	phaseReady     = "daemon_ready" // the daemon's readiness check passed (IMEX started)
	phaseJoined    = "pod_ready"    // the kubelet's patch marking the pod Ready
	phaseReadySeen = "ready_seen"   // the controller's cache first showed the pod Ready
)

var phaseOrder = []string{phaseRunning, phaseLabel, phaseList, phaseWatch, phaseSeen, phaseWritten, phaseClique, phaseReady, phaseJoined, phaseReadySeen}

// trace records when one instance first completed each phase, and how many of its calls failed.
type trace struct {
	start  time.Time
	mu     sync.Mutex
	at     map[string]time.Duration
	failed int
}

func newTrace() *trace { return &trace{start: time.Now(), at: map[string]time.Duration{}} }

func (t *trace) mark(phase string) { t.markAt(phase, time.Now()) }

// markAt marks phase as first reached at at, unless it was reached before.
func (t *trace) markAt(phase string, at time.Time) {
	d := at.Sub(t.start)
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.at[phase]; !ok {
		t.at[phase] = d
	}
}

func (t *trace) record(phase string, err error) {
	if err != nil {
		t.mu.Lock()
		t.failed++
		t.mu.Unlock()
		return
	}
	t.mark(phase)
}

// tracedClient is a daemon's client that marks its trace's label, list and watch phases, and
// in_clique when a clique it lists or watches names node: from label to in_clique is the
// controller's part (its watch of the pod, its pass, the clique's write and the watch event's
// delivery), from in_clique to daemon_ready the daemon's own. It adds no request: it only
// notes the results of the daemon's own.
type tracedClient struct {
	client.WithWatch
	t    *trace
	node string
}

func (c tracedClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	err := c.WithWatch.Patch(ctx, obj, patch, opts...)
	c.t.record(phaseLabel, err)
	return err
}

func (c tracedClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	err := c.WithWatch.List(ctx, list, opts...)
	c.t.record(phaseList, err)
	if l, ok := list.(*cdv1beta1.ComputeDomainCliqueList); ok && err == nil {
		for i := range l.Items {
			c.sawClique(&l.Items[i])
		}
	}
	return err
}

func (c tracedClient) Watch(ctx context.Context, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	w, err := c.WithWatch.Watch(ctx, list, opts...)
	c.t.record(phaseWatch, err)
	if _, ok := list.(*cdv1beta1.ComputeDomainCliqueList); !ok || err != nil || c.node == "" {
		return w, err
	}
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		if cl, ok := e.Object.(*cdv1beta1.ComputeDomainClique); ok && e.Type != watch.Deleted {
			c.sawClique(cl)
		}
		return e, true
	}), nil
}

// sawClique marks in_clique when cl names this trace's node.
func (c tracedClient) sawClique(cl *cdv1beta1.ComputeDomainClique) {
	if c.node != "" && slices.ContainsFunc(cl.Daemons, func(d cdv1beta1.ComputeDomainDaemonInfo) bool { return d.NodeName == c.node }) {
		c.t.mark(phaseClique)
	}
}

// Phase is one phase's spread over the instances that reached it, in milliseconds since each
// instance started.
type Phase struct {
	Name    string  `json:"name"`
	Reached int     `json:"reached"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
	MaxMs   float64 `json:"max_ms"`
}

// summarize returns the phases in order, with the instances whose calls failed at least once
// (retried by the daemon, its informer or client-go).
func summarize(traces []*trace) (phases []Phase, withFailures int) {
	by := map[string][]time.Duration{}
	for _, t := range traces {
		if t == nil {
			continue
		}
		t.mu.Lock()
		for p, d := range t.at {
			by[p] = append(by[p], d)
		}
		if t.failed > 0 {
			withFailures++
		}
		t.mu.Unlock()
	}
	for _, name := range phaseOrder {
		d := by[name]
		if len(d) == 0 {
			continue
		}
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		phases = append(phases, Phase{Name: name, Reached: len(d),
			P50Ms: percentile(d, 50), P99Ms: percentile(d, 99), MaxMs: float64(d[len(d)-1].Microseconds()) / 1000})
	}
	return phases, withFailures
}

// lastHop returns the milliseconds from the last instance's pod Ready, and from the
// controller's cache last showing a pod Ready, to ready (when the domain was seen Ready); nil
// where ready is zero or no instance reached the phase.
func lastHop(ready time.Time, traces []*trace) (fromReady, fromSeen *float64) {
	if ready.IsZero() {
		return nil, nil
	}
	last := func(phase string) *float64 {
		var latest time.Time
		for _, t := range traces {
			if t == nil {
				continue
			}
			t.mu.Lock()
			d, ok := t.at[phase]
			t.mu.Unlock()
			if at := t.start.Add(d); ok && at.After(latest) {
				latest = at
			}
		}
		if latest.IsZero() {
			return nil
		}
		ms := float64(ready.Sub(latest).Microseconds()) / 1e3
		return &ms
	}
	return last(phaseJoined), last(phaseReadySeen)
}
