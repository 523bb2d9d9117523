package kubelet

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func TestProbeThresholds(t *testing.T) {
	pr := &corev1.Probe{SuccessThreshold: 2, FailureThreshold: 2}
	var r probeResult
	var got []int
	for _, ok := range []bool{true, true, false, true, false, false, true} {
		got = append(got, r.record(pr, ok))
	}
	if diff := cmp.Diff([]int{0, 1, 0, 0, 0, -1, 0}, got); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
}
