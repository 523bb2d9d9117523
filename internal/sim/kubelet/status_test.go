package kubelet

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestNextStatusRetry: a second after a write that followed a success, doubling while writes
// keep failing, never more than the status manager's 10 s.
func TestNextStatusRetry(t *testing.T) {
	var got []time.Duration
	prev := time.Duration(0)
	for range 6 {
		prev = nextStatusRetry(prev)
		got = append(got, prev)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits %v, want %v", got, want)
		}
	}
}

func TestPodPhase(t *testing.T) {
	run := ctrSummary{running: true}
	ok := ctrSummary{terminated: true, finished: true}
	bad := ctrSummary{terminated: true, finished: true, exitCode: 2}
	restarting := ctrSummary{terminated: true, exitCode: 1} // will run again
	waiting := ctrSummary{}
	for name, tc := range map[string]struct {
		initFailed, initDone bool
		ctrs                 []ctrSummary
		want                 corev1.PodPhase
	}{
		"init failed":             {initFailed: true, want: corev1.PodFailed},
		"initializing":            {ctrs: []ctrSummary{run}, want: corev1.PodPending},
		"nothing started yet":     {initDone: true, ctrs: []ctrSummary{waiting, waiting}, want: corev1.PodPending},
		"one running":             {initDone: true, ctrs: []ctrSummary{run, waiting}, want: corev1.PodRunning},
		"one done, one running":   {initDone: true, ctrs: []ctrSummary{ok, run}, want: corev1.PodRunning},
		"restarting":              {initDone: true, ctrs: []ctrSummary{restarting}, want: corev1.PodRunning},
		"all succeeded":           {initDone: true, ctrs: []ctrSummary{ok, ok}, want: corev1.PodSucceeded},
		"one failed":              {initDone: true, ctrs: []ctrSummary{ok, bad}, want: corev1.PodFailed},
		"failed one still to run": {initDone: true, ctrs: []ctrSummary{bad, run}, want: corev1.PodRunning},
	} {
		t.Run(name, func(t *testing.T) {
			if got := podPhase(tc.initFailed, tc.initDone, tc.ctrs); got != tc.want {
				t.Errorf("podPhase = %s, want %s", got, tc.want)
			}
		})
	}
}
