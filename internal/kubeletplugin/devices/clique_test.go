package devices

import (
	"context"
	"errors"
	"testing"

	"cdplane/internal/kubeletplugin/failure"
	"cdplane/internal/nvml"
)

// fakeDiscoverer answers from a list of results, one per call, repeating the last.
type fakeDiscoverer struct {
	results []nvml.Result
	errs    []error
	calls   int
}

func (f *fakeDiscoverer) Discover(context.Context) (nvml.Result, error) {
	i := min(f.calls, len(f.results)-1)
	f.calls++
	return f.results[i], f.errs[i]
}

func TestCliqueTracker(t *testing.T) {
	notReady := &nvml.NotReadyError{State: nvml.FabricStateInProgress}
	failed := &nvml.FabricError{State: nvml.FabricStateCompleted, Status: 3}
	type step struct {
		id      string
		err     error
		changed bool
		fatal   bool
		current string
		curErr  bool
	}
	cases := map[string]struct {
		crash bool
		steps []step
	}{
		"not ready, then known, then unchanged": {steps: []step{
			{err: notReady, curErr: true},
			{id: "c.1", changed: true, current: "c.1"},
			{id: "c.1", current: "c.1"},
		}},
		"no fabric is known": {steps: []step{{id: "", changed: true, current: ""}}},
		// As NVIDIA's driver: the node serves as one without a fabric (empty clique), and
		// gets its clique back once the registration succeeds again.
		"fabric failure: a node without fabric when not crashing": {steps: []step{
			{id: "c.1", changed: true, current: "c.1"},
			{err: failed, changed: true, current: ""},
			{id: "c.1", changed: true, current: "c.1"},
		}},
		"fabric failure is fatal when crashing": {crash: true, steps: []step{{err: failed, fatal: true, curErr: true}}},
		"not ready is never fatal":              {crash: true, steps: []step{{err: notReady, curErr: true}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeDiscoverer{}
			for _, s := range tc.steps {
				f.results = append(f.results, nvml.Result{CliqueID: s.id})
				f.errs = append(f.errs, s.err)
			}
			tr := &CliqueTracker{disc: f, crash: tc.crash}
			for i, s := range tc.steps {
				changed, fatal := tr.Refresh(context.Background())
				if changed != s.changed || (fatal != nil) != s.fatal {
					t.Errorf("step %d: changed=%v fatal=%v, want %v %v", i, changed, fatal, s.changed, s.fatal)
				}
				cur, err := tr.Current()
				if cur != s.current || (err != nil) != s.curErr || (err != nil && !failure.IsRetryable(err)) {
					t.Errorf("step %d: current %q %v, want %q err=%v (retryable)", i, cur, err, s.current, s.curErr)
				}
			}
		})
	}
	if !errors.Is(failed, nvml.ErrFabricFailed) {
		t.Fatal("test premise: a FabricError is a fabric failure")
	}
}
