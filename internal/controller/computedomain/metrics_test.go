package computedomain

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/membership"
	"cdplane/internal/metrics"
	"cdplane/internal/testutil"
)

func entry(node, status string) membership.Entry {
	return membership.Entry{NodeName: node, CliqueID: "c.1", Status: status}
}

// TestJoinTracker: each join is observed once, when its entry is first Ready, with the time from
// the entry's first appearance; entries present at a domain's first observation (joined before
// the controller started) are not; a node that leaves and joins again is measured again.
func TestJoinTracker(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const ready, notReady = cdv1beta1.StatusReady, cdv1beta1.StatusNotReady
	type step struct {
		after   time.Duration
		entries []membership.Entry
		want    []time.Duration
	}
	cases := map[string][]step{
		"two nodes join and turn Ready at different times": {
			{0, nil, nil},
			{time.Second, []membership.Entry{entry("a", notReady)}, nil},
			{2 * time.Second, []membership.Entry{entry("a", notReady), entry("b", notReady)}, nil},
			{5 * time.Second, []membership.Entry{entry("a", ready), entry("b", notReady)}, []time.Duration{4 * time.Second}},
			{9 * time.Second, []membership.Entry{entry("a", ready), entry("b", ready)}, []time.Duration{7 * time.Second}},
			{20 * time.Second, []membership.Entry{entry("a", ready), entry("b", ready)}, nil},
		},
		"Ready at first sight of the entry: observed as zero": {
			{0, nil, nil},
			{3 * time.Second, []membership.Entry{entry("a", ready)}, []time.Duration{0}},
		},
		"a flap after Ready is not a new join": {
			{0, nil, nil},
			{time.Second, []membership.Entry{entry("a", notReady)}, nil},
			{2 * time.Second, []membership.Entry{entry("a", ready)}, []time.Duration{time.Second}},
			{3 * time.Second, []membership.Entry{entry("a", notReady)}, nil},
			{4 * time.Second, []membership.Entry{entry("a", ready)}, nil},
		},
		"leave and join again: measured again from the new entry": {
			{0, nil, nil},
			{time.Second, []membership.Entry{entry("a", ready)}, []time.Duration{0}},
			{2 * time.Second, nil, nil},
			{5 * time.Second, []membership.Entry{entry("a", notReady)}, nil},
			{8 * time.Second, []membership.Entry{entry("a", ready)}, []time.Duration{3 * time.Second}},
		},
		"after a restart: entries of the first observation are not measured, later joins are": {
			{0, []membership.Entry{entry("a", ready), entry("b", notReady)}, nil},
			{time.Second, []membership.Entry{entry("a", ready), entry("b", ready), entry("c", notReady)}, nil},
			{3 * time.Second, []membership.Entry{entry("a", ready), entry("b", ready), entry("c", ready)}, []time.Duration{2 * time.Second}},
		},
	}
	for name, steps := range cases {
		t.Run(name, func(t *testing.T) {
			tr := newJoinTracker()
			for i, s := range steps {
				got := tr.observe("uid-1", s.entries, t0.Add(s.after))
				if diff := cmp.Diff(s.want, got); diff != "" {
					t.Errorf("step %d: observed durations (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

func TestJoinTrackerForget(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tr := newJoinTracker()
	tr.observe("uid-1", nil, t0)
	tr.observe("uid-1", []membership.Entry{entry("a", cdv1beta1.StatusNotReady)}, t0.Add(time.Second))
	tr.observe("uid-2", nil, t0)
	tr.forget("uid-1")
	if _, ok := tr.domains["uid-1"]; ok || len(tr.domains) != 1 {
		t.Fatalf("after forget: tracked domains %v, want only uid-2", tr.domains)
	}
	// A forgotten domain seen again is a first observation: its entries are not measured.
	if got := tr.observe("uid-1", []membership.Entry{entry("a", cdv1beta1.StatusReady)}, t0.Add(2*time.Second)); len(got) != 0 {
		t.Errorf("first observation after forget: observed %v, want nothing", got)
	}
}

func domain(uid, status string, created time.Time, conds ...metav1.Condition) *cdv1beta1.ComputeDomain {
	cd := testutil.MakeComputeDomain("cd-" + uid).Namespace("ns").UID(types.UID(uid)).Obj()
	cd.CreationTimestamp = metav1.NewTime(created)
	cd.Status.Status = status
	cd.Status.Conditions = conds
	return cd
}

func readyCondition(status metav1.ConditionStatus, at time.Time) metav1.Condition {
	return metav1.Condition{Type: cdv1beta1.ConditionReady, Status: status, Reason: "R", LastTransitionTime: metav1.NewTime(at)}
}

func TestStateOf(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	turned := created.Add(time.Hour)
	cases := map[string]struct {
		cd   *cdv1beta1.ComputeDomain
		want domainState
	}{
		"Ready": {domain("u", cdv1beta1.StatusReady, created, readyCondition(metav1.ConditionTrue, turned)), domainState{ready: true}},
		"NotReady: since its Ready condition turned False":   {domain("u", cdv1beta1.StatusNotReady, created, readyCondition(metav1.ConditionFalse, turned)), domainState{notReadySince: turned}},
		"not reported on yet: NotReady since its creation":   {domain("u", "", created), domainState{notReadySince: created}},
		"NotReady without a Ready condition: since creation": {domain("u", cdv1beta1.StatusNotReady, created), domainState{notReadySince: created}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, stateOf(tc.cd), cmp.AllowUnexported(domainState{})); diff != "" {
				t.Errorf("stateOf (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDomainGauges drives the informer handler through a sequence of domain events and checks
// the series the collector exports after each: counts by status across domains, the oldest
// NotReady time, a deleted domain (also as a tombstone) gone.
func TestDomainGauges(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const id = "plane-a"
	states := newDomainStates()
	h := states.handler()
	c := metrics.NewDomainsCollector()
	remove := c.Add(id, states.counts)
	want := func(step string, ready, notReady int, oldest time.Time) {
		t.Helper()
		w := map[string]float64{"Ready": float64(ready), "NotReady": float64(notReady)}
		if !oldest.IsZero() {
			w["oldest"] = float64(oldest.Unix())
		}
		if diff := cmp.Diff(w, collect(t, c)); diff != "" {
			t.Errorf("%s: series (-want +got):\n%s", step, diff)
		}
	}
	want("no domain", 0, 0, time.Time{})

	a := domain("a", "", t0)
	h.OnAdd(a, false)
	want("a created, not reported on", 0, 1, t0)

	b := domain("b", cdv1beta1.StatusNotReady, t0.Add(time.Minute), readyCondition(metav1.ConditionFalse, t0.Add(time.Minute)))
	h.OnAdd(b, false)
	want("b created NotReady", 0, 2, t0)

	a2 := domain("a", cdv1beta1.StatusReady, t0, readyCondition(metav1.ConditionTrue, t0.Add(2*time.Minute)))
	h.OnUpdate(a, a2)
	want("a Ready", 1, 1, t0.Add(time.Minute))

	b2 := domain("b", cdv1beta1.StatusReady, t0.Add(time.Minute), readyCondition(metav1.ConditionTrue, t0.Add(3*time.Minute)))
	h.OnUpdate(b, b2)
	want("b Ready", 2, 0, time.Time{})

	a3 := domain("a", cdv1beta1.StatusNotReady, t0, readyCondition(metav1.ConditionFalse, t0.Add(4*time.Minute)))
	h.OnUpdate(a2, a3)
	want("a NotReady again", 1, 1, t0.Add(4*time.Minute))

	h.OnDelete(a3)
	want("a deleted", 1, 0, time.Time{})

	h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/cd-b", Obj: b2})
	want("b deleted (tombstone)", 0, 0, time.Time{})

	remove()
	if diff := cmp.Diff(map[string]float64{}, collect(t, c)); diff != "" {
		t.Errorf("after the source is removed: series (-want +got):\n%s", diff)
	}
}

// TestDomainDeletionForgetsJoins: the informer's delete event drops the domain from the join
// tracker.
func TestDomainDeletionForgetsJoins(t *testing.T) {
	cd := domain("deleted-uid", cdv1beta1.StatusReady, time.Now())
	joins.observe(cd.UID, nil, time.Now())
	newDomainStates().handler().OnDelete(cd)
	joins.mu.Lock()
	defer joins.mu.Unlock()
	if _, ok := joins.domains[cd.UID]; ok {
		t.Error("the deleted domain is still tracked for joins")
	}
}

// collect gathers c's series of plane plane-a: the domain counts by status, and "oldest".
func collect(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels[metrics.LabelControlPlaneID] != "plane-a" {
				t.Errorf("series %s %v: not of plane-a", mf.GetName(), labels)
			}
			switch mf.GetName() {
			case metrics.ComputeDomainsName:
				got[labels[metrics.LabelStatus]] = m.GetGauge().GetValue()
			case metrics.ComputeDomainsOldestNotReadyName:
				got["oldest"] = m.GetGauge().GetValue()
			default:
				t.Errorf("unexpected series %s", mf.GetName())
			}
		}
	}
	return got
}
