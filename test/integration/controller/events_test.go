package controller

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/computedomain"
)

// domainEvents lists the controller's events regarding the domain (events.k8s.io/v1, field
// selector regarding.name), oldest first.
func (e *env) domainEvents(cd *cdv1beta1.ComputeDomain) ([]eventsv1.Event, error) {
	list := &eventsv1.EventList{}
	if err := e.c.List(context.Background(), list, client.InNamespace(cd.Namespace), client.MatchingFields{"regarding.name": cd.Name}); err != nil {
		return nil, err
	}
	var out []eventsv1.Event
	for _, ev := range list.Items {
		if ev.Regarding.UID == cd.UID && ev.ReportingController == computedomain.EventReportingController {
			out = append(out, ev)
		}
	}
	slices.SortStableFunc(out, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	return out, nil
}

// eventJoins matches the count of a NodesJoined note: "3 nodes joined (a, b, c)", and what was
// held back, ", and 412 more joined since the last event".
var eventJoins = regexp.MustCompile(`^(\d+) nodes? joined \(.*?\)(?:, and (\d+) more joined since the last event)?;`)

// eventsByReason counts the events by reason, and the joins their notes report.
func eventsByReason(evs []eventsv1.Event) (map[string]int, int) {
	count, joins := map[string]int{}, 0
	for _, ev := range evs {
		count[ev.Reason]++
		if m := eventJoins.FindStringSubmatch(ev.Note); ev.Reason == computedomain.EventNodesJoined && m != nil {
			n, _ := strconv.Atoi(m[1])
			more, _ := strconv.Atoi(m[2])
			joins += n + more
		}
	}
	return count, joins
}

func describeEvents(evs []eventsv1.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "\n  %s %s %s: %s", ev.EventTime.Format(time.RFC3339Nano), ev.Type, ev.Reason, ev.Note)
	}
	return b.String()
}

// deleteDomainNodes deletes the cluster-scoped nodes a test created for the domain.
func deleteDomainNodes(t *testing.T, cd *cdv1beta1.ComputeDomain, names ...string) {
	t.Cleanup(func() {
		ctx := context.Background()
		_ = testCluster.Client.DeleteAllOf(ctx, &corev1.Node{}, client.MatchingLabels{cdv1beta1.ComputeDomainLabel: string(cd.UID)})
		for _, n := range names {
			_ = testCluster.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
		}
	})
}

// TestEventsOnAComputeDomain: nodes join and turn Ready, one leaves, one is blocked by a host
// IMEX: the domain gets NodesJoined, DomainReady, NodesLeft, DomainNotReady (saying why) and
// NodesBlocked (naming the node and the reason), from the controller, through events.k8s.io.
func TestEventsOnAComputeDomain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	cd := e.createCD("events", 3)
	owner, err := e.daemonSetRef(cd)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for i := range 3 {
		nodes = append(nodes, fmt.Sprintf("%s-h%05d", e.ns, i))
	}
	deleteDomainNodes(t, cd, nodes...)
	for i := range 3 {
		if err := createReadyDaemon(e.c, e, cd, owner, i); err != nil {
			t.Fatal(err)
		}
	}
	e.waitStatus(cd, cdv1beta1.StatusReady, 30*time.Second)
	var evs []eventsv1.Event
	waitEvents := func(what string, cond func(count map[string]int, joins int) bool) {
		t.Helper()
		e.eventually(2*time.Minute, what, func() (bool, error) {
			var err error
			if evs, err = e.domainEvents(cd); err != nil {
				return false, err
			}
			count, joins := eventsByReason(evs)
			return cond(count, joins), nil
		})
	}
	waitEvents("NodesJoined for 3 nodes and DomainReady", func(count map[string]int, joins int) bool {
		return joins == 3 && count[computedomain.EventDomainReady] == 1
	})
	for _, ev := range evs {
		if ev.Type != corev1.EventTypeNormal || ev.Action == "" || ev.Regarding.Kind != "ComputeDomain" ||
			!strings.HasPrefix(ev.ReportingInstance, computedomain.EventReportingController+"-") {
			t.Errorf("event %s %s: type, action, regarding or reporting instance not as expected: %+v", ev.Reason, ev.Note, ev)
		}
	}
	// The DomainReady event says why; a join held back by the rate limit or by a stale read
	// may be posted after it (its timer), so the order of the two kinds is not fixed.
	for _, ev := range evs {
		if ev.Reason == computedomain.EventDomainReady && !strings.Contains(ev.Note, "all 3 nodes are ready") {
			t.Errorf("DomainReady %q, want it to say all 3 nodes are ready:%s", ev.Note, describeEvents(evs))
		}
	}

	// One node leaves: its label goes, as when its last channel claim is unprepared.
	e.unlabelNode(nodes[2])
	waitEvents("NodesLeft and DomainNotReady", func(count map[string]int, _ int) bool {
		return count[computedomain.EventNodesLeft] == 1 && count[computedomain.EventDomainNotReady] == 1
	})
	for _, ev := range evs {
		switch ev.Reason {
		case computedomain.EventNodesLeft:
			if want := fmt.Sprintf("1 node left (%s); 2 of 3 joined, 2 Ready", nodes[2]); ev.Note != want || ev.Type != corev1.EventTypeNormal {
				t.Errorf("NodesLeft %s %q, want Normal %q", ev.Type, ev.Note, want)
			}
		case computedomain.EventDomainNotReady:
			if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Note, cdv1beta1.ReasonWaitingForNodes) {
				t.Errorf("DomainNotReady %s %q, want a Warning saying %s", ev.Type, ev.Note, cdv1beta1.ReasonWaitingForNodes)
			}
		}
	}

	// One node's daemon finds a host IMEX holding the node's session.
	pod := &corev1.Pod{}
	if err := e.c.Get(e.ctx(), types.NamespacedName{Namespace: e.driverNS, Name: "d-00000"}, pod); err != nil {
		t.Fatal(err)
	}
	orig := pod.DeepCopy()
	pod.Labels[cdv1beta1.IMEXBlockedLabel] = cdv1beta1.IMEXBlockedHostIMEXInUse
	if err := e.c.Patch(e.ctx(), pod, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	waitEvents("NodesBlocked", func(count map[string]int, _ int) bool { return count[computedomain.EventNodesBlocked] == 1 })
	for _, ev := range evs {
		if ev.Reason == computedomain.EventNodesBlocked {
			want := fmt.Sprintf("1 node blocked (%s: %s)", nodes[0], cdv1beta1.IMEXBlockedHostIMEXInUse)
			if ev.Type != corev1.EventTypeWarning || !strings.HasPrefix(ev.Note, want) || !strings.Contains(ev.Note, "systemctl disable --now nvidia-imex") {
				t.Errorf("NodesBlocked %s %q, want a Warning starting %q with the fix", ev.Type, ev.Note, want)
			}
		}
	}
	count, _ := eventsByReason(evs)
	for reason, n := range count {
		if reason != computedomain.EventNodesJoined && n != 1 {
			t.Errorf("%d %s events, want one:%s", n, reason, describeEvents(evs))
		}
	}
	t.Logf("events:%s", describeEvents(evs))
}

// TestEventsOfABurstAreBounded: nodes join a domain all at once, each as fast as the apiserver
// takes them; the domain gets a bounded number of events — the limiter's burst and one per
// interval for the joins, one DomainReady — and their notes still count every join. The count
// and rate are printed; the bound comes from the limits and the time the burst took, not from
// the machine's speed.
func TestEventsOfABurstAreBounded(t *testing.T) {
	t.Parallel()
	const n = 2304
	e := newEnv(t, true)
	fast := rest.CopyConfig(testCluster.Config)
	fast.QPS, fast.Burst = 1000, 2000
	c, err := client.New(fast, client.Options{Scheme: testCluster.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cd := e.createCD("burst", n)
	deleteDomainNodes(t, cd)
	owner, err := e.daemonSetRef(cd)
	if err != nil {
		t.Fatal(err)
	}
	createReadyDaemons(t, c, e, cd, owner, n)
	created := time.Since(start)
	e.waitStatus(cd, cdv1beta1.StatusReady, 5*time.Minute)
	ready := time.Since(start)

	// The joins held back by the limiter come in the next event of their kind, at most one
	// interval after the last.
	limits := computedomain.DefaultEventLimits()
	var evs []eventsv1.Event
	var count map[string]int
	var joins int
	e.eventually(limits.Interval+3*time.Minute, "events counting every join", func() (bool, error) {
		var err error
		if evs, err = e.domainEvents(cd); err != nil {
			return false, err
		}
		count, joins = eventsByReason(evs)
		return joins >= n && count[computedomain.EventDomainReady] == 1, nil
	})
	elapsed := time.Since(start)
	t.Logf("%d nodes: pods created in %v, domain Ready after %v; %d events in %v (%.1f a minute): %v",
		n, created.Round(time.Second), ready.Round(time.Second), len(evs), elapsed.Round(time.Second), float64(len(evs))/elapsed.Minutes(), count)
	bound := limits.Burst + int(elapsed/limits.Interval)
	if count[computedomain.EventNodesJoined] > bound {
		t.Errorf("%d NodesJoined events in %v, want at most %d (burst %d + one per %v)", count[computedomain.EventNodesJoined], elapsed, bound, limits.Burst, limits.Interval)
	}
	if joins != n || len(evs) != count[computedomain.EventNodesJoined]+1 {
		t.Errorf("events report %d joins, want %d, and only NodesJoined and one DomainReady:%s", joins, n, describeEvents(evs))
	}
}
