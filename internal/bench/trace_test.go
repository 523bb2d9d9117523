package bench

import (
	"errors"
	"testing"
	"time"
)

func TestSummarizeOrdersPhasesAndCountsRetries(t *testing.T) {
	mk := func(failed int, at map[string]time.Duration) *trace {
		return &trace{at: at, failed: failed}
	}
	traces := []*trace{
		mk(0, map[string]time.Duration{phaseJoined: 4 * time.Second, phaseLabel: time.Second}),
		mk(2, map[string]time.Duration{phaseJoined: 6 * time.Second, phaseLabel: 3 * time.Second}),
		nil, // an instance that had not started
		mk(0, map[string]time.Duration{phaseLabel: 2 * time.Second}),
	}
	phases, retrying := summarize(traces)
	if retrying != 1 {
		t.Errorf("instances retrying: %d, want 1", retrying)
	}
	if len(phases) != 2 || phases[0].Name != phaseLabel || phases[1].Name != phaseJoined {
		t.Fatalf("phases out of order or missing: %+v", phases)
	}
	if l := phases[0]; l.Reached != 3 || l.P50Ms != 2000 || l.MaxMs != 3000 {
		t.Errorf("label: %+v, want 3 reached, p50 2000, max 3000", l)
	}
	if j := phases[1]; j.Reached != 2 || j.P50Ms != 4000 || j.P99Ms != 6000 {
		t.Errorf("pod_ready: %+v, want 2 reached, p50 4000, p99 6000", j)
	}
}

func TestTraceKeepsFirstSuccessAndCountsFailures(t *testing.T) {
	tr := newTrace()
	tr.record(phaseLabel, errors.New("429"))
	if _, ok := tr.at[phaseLabel]; ok || tr.failed != 1 {
		t.Fatalf("a failed call marked its phase: %+v", tr)
	}
	tr.record(phaseLabel, nil)
	first := tr.at[phaseLabel]
	tr.start = tr.start.Add(-time.Second) // a later success is a second further from the start
	tr.record(phaseLabel, nil)
	if tr.at[phaseLabel] != first {
		t.Errorf("a later success moved the phase from %v to %v", first, tr.at[phaseLabel])
	}
}
