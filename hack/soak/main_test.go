package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func stream(t *testing.T, evs ...event) string {
	t.Helper()
	var b strings.Builder
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for i, ev := range evs {
		ev.Time = at.Add(time.Duration(i) * time.Second)
		ev.Package = "cdplane/test/e2e"
		line, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	return b.String()
}

func run(t *testing.T, runs int, in string) (string, bool) {
	t.Helper()
	var out bytes.Buffer
	r := &report{out: &out, runs: runs, scenarios: map[string]*scenario{}, output: map[string][]string{}}
	if err := r.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	ok := r.summary()
	return out.String(), ok
}

func TestEveryRunReportedAndAFailureShown(t *testing.T) {
	in := stream(t,
		event{Action: "run", Test: "TestA"},
		event{Action: "output", Test: "TestA", Output: "a ok\n"},
		event{Action: "pass", Test: "TestA", Elapsed: 10},
		event{Action: "run", Test: "TestB"},
		event{Action: "run", Test: "TestB/sub"},
		event{Action: "output", Test: "TestB/sub", Output: "    b_test.go:12: the domain is NotReady\n"},
		event{Action: "fail", Test: "TestB/sub", Elapsed: 3},
		event{Action: "fail", Test: "TestB", Elapsed: 4},
		event{Action: "run", Test: "TestA"},
		event{Action: "pass", Test: "TestA", Elapsed: 12},
		event{Action: "run", Test: "TestB"},
		event{Action: "pass", Test: "TestB", Elapsed: 5},
		event{Action: "fail"},
	)
	out, ok := run(t, 2, in)
	if ok {
		t.Errorf("a failed run reported as a pass:\n%s", out)
	}
	for _, want := range []string{
		"run 1/2  TestA", "run 2/2  TestA", "run 1/2  TestB", "FAIL 4s",
		"b_test.go:12: the domain is NotReady", // the failed run's log
		"SOAK FAILED",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "a ok") {
		t.Errorf("a passing run's output printed:\n%s", out)
	}
	for _, row := range []string{"TestA", "TestB"} {
		if !strings.Contains(out, "\n"+row) {
			t.Errorf("no summary row for %s:\n%s", row, out)
		}
	}
}

func TestAllPassed(t *testing.T) {
	in := stream(t,
		event{Action: "run", Test: "TestA"},
		event{Action: "pass", Test: "TestA", Elapsed: 10},
		event{Action: "run", Test: "TestA"},
		event{Action: "pass", Test: "TestA", Elapsed: 20},
		event{Action: "pass"},
	)
	out, ok := run(t, 2, in)
	if !ok || !strings.Contains(out, "every run passed") {
		t.Errorf("all runs passed, report says otherwise:\n%s", out)
	}
}

// Fewer runs than asked (the binary died, a timeout) and a binary that failed outside every
// scenario are failures, even though no scenario reported one.
func TestStoppedEarlyOrFailedOutsideScenarios(t *testing.T) {
	early := stream(t,
		event{Action: "run", Test: "TestA"},
		event{Action: "pass", Test: "TestA", Elapsed: 10},
		event{Action: "output", Output: "panic: test timed out after 40m0s\n"},
		event{Action: "fail"},
	)
	if out, ok := run(t, 3, early); ok || !strings.Contains(out, "ran 1 times, not 3") || !strings.Contains(out, "panic: test timed out") {
		t.Errorf("a binary that stopped after one of three runs:\n%s", out)
	}
	outside := stream(t,
		event{Action: "run", Test: "TestA"},
		event{Action: "pass", Test: "TestA", Elapsed: 10},
		event{Action: "output", Output: "stopping the simulated cluster: etcd did not stop\n"},
		event{Action: "fail"},
	)
	if out, ok := run(t, 1, outside); ok {
		t.Errorf("a binary that failed after its scenarios passed:\n%s", out)
	}
	if out, ok := run(t, 1, "# cdplane/test/e2e\nfoo.go:1: syntax error\nFAIL\n"); ok || !strings.Contains(out, "no scenario ran") {
		t.Errorf("a build failure:\n%s", out)
	}
}

// TestFailedRunSavedWhole: a failed run's whole output goes to a file named for the scenario and
// run, the failure message included even when more than the printed tail of diagnostics follows
// it; the report prints the path.
func TestFailedRunSavedWhole(t *testing.T) {
	evs := []event{{Action: "run", Test: "TestB"}, {Action: "output", Test: "TestB", Output: "    b_test.go:12: the message\n"}}
	for i := range 2 * tailLines {
		evs = append(evs, event{Action: "output", Test: "TestB", Output: fmt.Sprintf("    helpers_test.go:9: diagnostic %d\n", i)})
	}
	evs = append(evs, event{Action: "fail", Test: "TestB", Elapsed: 4})
	var out bytes.Buffer
	dir := t.TempDir()
	r := &report{out: &out, runs: 1, scenarios: map[string]*scenario{}, output: map[string][]string{}, failedDir: dir}
	if err := r.read(strings.NewReader(stream(t, evs...))); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "TestB-run1.log")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "the message") || !strings.Contains(string(data), fmt.Sprintf("diagnostic %d", 2*tailLines-1)) {
		t.Errorf("saved output:\n%s", data)
	}
	if !strings.Contains(out.String(), "whole output: "+path) || strings.Contains(out.String(), "the message") {
		t.Errorf("report (the path, and a tail without the message that scrolled out of it):\n%s", out.String())
	}
}
