package status

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/testutil"
)

func TestLatestWarning(t *testing.T) {
	ev := func(typ, reason, msg string, at time.Time) corev1.Event {
		return corev1.Event{Type: typ, Reason: reason, Message: msg, LastTimestamp: metav1.NewTime(at)}
	}
	series := ev("Warning", "Unhealthy", "Readiness probe failed: IMEX is not ready:\n  recovering", testNow.Add(-time.Hour))
	series.Series = &corev1.EventSeries{LastObservedTime: metav1.NewMicroTime(testNow)}
	cases := map[string]struct {
		events []corev1.Event
		want   string
	}{
		"none":        {},
		"normal only": {events: []corev1.Event{ev("Normal", "Started", "started", testNow)}},
		"reported time, not creation, decides": {
			events: func() []corev1.Event {
				older, newer := ev("Warning", "Unhealthy", "older", testNow.Add(-time.Minute)), ev("Warning", "Unhealthy", "newer", testNow)
				older.CreationTimestamp, newer.CreationTimestamp = metav1.NewTime(testNow), metav1.NewTime(testNow.Add(-time.Hour))
				return []corev1.Event{older, newer}
			}(),
			want: "Unhealthy: newer",
		},
		"no reported time: creation": {
			events: func() []corev1.Event {
				a, b := corev1.Event{Type: "Warning", Reason: "A"}, corev1.Event{Type: "Warning", Reason: "B"}
				a.CreationTimestamp, b.CreationTimestamp = metav1.NewTime(testNow), metav1.NewTime(testNow.Add(-time.Hour))
				return []corev1.Event{b, a}
			}(),
			want: "A: ",
		},
		"the latest warning, on one line": {
			events: []corev1.Event{
				ev("Warning", "HostIMEXInUse", "old", testNow.Add(-time.Minute)),
				series,
				ev("Normal", "Pulled", "newer but normal", testNow.Add(time.Minute)),
			},
			want: "Unhealthy: Readiness probe failed: IMEX is not ready: recovering",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := LatestWarning(tc.events); got != tc.want {
				t.Errorf("LatestWarning = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestClaimNode(t *testing.T) {
	onNode := func(w *testutil.ResourceClaimWrapper, node string) *resourcev1.ResourceClaim {
		c := w.Obj()
		c.Status.Allocation.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}}
		return c
	}
	cases := map[string]struct {
		claim *resourcev1.ResourceClaim
		want  string
	}{
		"not allocated": {claim: testutil.MakeResourceClaim("c", "ns").Obj()},
		"another driver": {claim: onNode(testutil.MakeResourceClaim("c", "ns").
			Device("r", "gpu.nvidia.com", "n1", "gpu-0"), "n1")},
		"the node selector names the node": {claim: onNode(testutil.MakeResourceClaim("c", "ns").
			Device("r", cdv1beta1.DriverName, "n1", "channel-0"), "n1"), want: "n1"},
		"no node selector: the pool": {claim: testutil.MakeResourceClaim("c", "ns").
			Device("r", cdv1beta1.DriverName, "n2", "channel-0").Obj(), want: "n2"},
		"being deleted": {claim: func() *resourcev1.ResourceClaim {
			c := testutil.MakeResourceClaim("c", "ns").Device("r", cdv1beta1.DriverName, "n2", "channel-0").Obj()
			c.DeletionTimestamp = &metav1.Time{Time: testNow}
			return c
		}()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ClaimNode(tc.claim); got != tc.want {
				t.Errorf("ClaimNode = %q, want %q", got, tc.want)
			}
		})
	}
}
