// Command soak reads `go test -json` of the end-to-end scenarios run many times (`make soak`:
// -count=N on one simulated cluster) and reports each run as it ends, then each scenario's
// passes and failures. A failed run prints the last lines its scenario logged and writes all of
// them (up to keptLines) to a file in -failed-dir, whose path it prints: the failure message often
// comes before the diagnostics a scenario logs after it. So a flake seen once in twenty runs can
// be read without running it again. It exits 1 when any run
// failed, or when the test binary failed outside a scenario (the simulated cluster did not
// start).
//
//	CDPLANE_E2E=1 go test -json -count=20 -run '^(TestA|TestB)$' ./test/e2e | go run ./hack/soak -runs 20
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// tailLines is how many of a failed run's last output lines are printed; keptLines how many of
// its lines are kept for its file.
const (
	tailLines = 40
	keptLines = 20000
)

type scenario struct {
	runs, passed, failed, skipped int
	durations                     []time.Duration
	failedRuns                    []int
}

type report struct {
	out       io.Writer
	runs      int // runs asked for, for "run i/N"
	scenarios map[string]*scenario
	order     []string
	output    map[string][]string // output of the run in progress, per scenario (top-level test)
	failedDir string              // where a failed run's whole output goes; "" prints the tail only
	pkgFailed bool
	pkgOutput []string
}

func main() {
	runs := flag.Int("runs", 0, "runs asked for (-count), shown as run i/N; 0: not shown")
	failedDir := flag.String("failed-dir", filepath.Join(os.TempDir(), fmt.Sprintf("cdplane-soak-%d", os.Getpid())),
		"directory for the whole output of each failed run (created when a run fails)")
	flag.Parse()
	r := &report{out: os.Stdout, runs: *runs, scenarios: map[string]*scenario{}, output: map[string][]string{}, failedDir: *failedDir}
	if err := r.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	if !r.summary() {
		os.Exit(1)
	}
}

func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil || ev.Action == "" {
			// go test prints build failures as plain text.
			r.pkgOutput = keepTail(append(r.pkgOutput, string(line)))
			continue
		}
		r.handle(ev)
	}
	return sc.Err()
}

func (r *report) handle(ev event) {
	if ev.Test == "" {
		switch ev.Action {
		case "output":
			r.pkgOutput = keepTail(append(r.pkgOutput, strings.TrimRight(ev.Output, "\n")))
		case "fail":
			r.pkgFailed = true
		}
		return
	}
	top, _, _ := strings.Cut(ev.Test, "/")
	switch ev.Action {
	case "run":
		if top == ev.Test {
			r.output[top] = nil
		}
	case "output":
		r.output[top] = keepLast(append(r.output[top], strings.TrimRight(ev.Output, "\n")), keptLines)
	case "pass", "fail", "skip":
		if top != ev.Test {
			return // a subtest: its parent reports the run
		}
		s := r.scenarios[top]
		if s == nil {
			s = &scenario{}
			r.scenarios[top] = s
			r.order = append(r.order, top)
		}
		s.runs++
		d := time.Duration(ev.Elapsed * float64(time.Second)).Round(100 * time.Millisecond)
		of := ""
		if r.runs > 0 {
			of = fmt.Sprintf("/%d", r.runs)
		}
		fmt.Fprintf(r.out, "%s  run %d%s  %-45s %-4s %s\n", ev.Time.Format(time.TimeOnly), s.runs, of, top, strings.ToUpper(ev.Action), d)
		switch ev.Action {
		case "pass":
			s.passed++
			s.durations = append(s.durations, d)
		case "skip":
			s.skipped++
		case "fail":
			s.failed++
			s.failedRuns = append(s.failedRuns, s.runs)
			if path, err := r.saveFailed(top, s.runs); err != nil {
				fmt.Fprintf(r.out, "    --- its whole output could not be saved: %v\n", err)
			} else if path != "" {
				fmt.Fprintf(r.out, "    --- whole output: %s\n", path)
			}
			fmt.Fprintf(r.out, "    --- last %d lines of %s, run %d:\n", tailLines, top, s.runs)
			for _, l := range keepLast(r.output[top], tailLines) {
				fmt.Fprintf(r.out, "    | %s\n", l)
			}
		}
		r.output[top] = nil
	}
}

func keepTail(lines []string) []string { return keepLast(lines, tailLines) }

func keepLast(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}

// saveFailed writes the output kept of scenario top's run to <failedDir>/<top>-run<run>.log and
// returns its path ("" without a directory).
func (r *report) saveFailed(top string, run int) (string, error) {
	if r.failedDir == "" {
		return "", nil
	}
	if err := os.MkdirAll(r.failedDir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(r.failedDir, fmt.Sprintf("%s-run%d.log", top, run))
	return path, os.WriteFile(path, []byte(strings.Join(r.output[top], "\n")+"\n"), 0o644)
}

// summary prints each scenario's counts and says whether every run passed.
func (r *report) summary() bool {
	// The package fails when a scenario fails, and also when something outside every
	// scenario does (the simulated cluster not starting or not stopping cleanly).
	ok := !r.pkgFailed
	fmt.Fprintln(r.out)
	fmt.Fprintf(r.out, "%-45s %5s %6s %6s %7s %9s %9s  %s\n", "SCENARIO", "RUNS", "PASSED", "FAILED", "SKIPPED", "MEDIAN", "MAX", "FAILED RUNS")
	for _, name := range r.order {
		s := r.scenarios[name]
		med, longest := "-", "-"
		if len(s.durations) > 0 {
			d := slices.Clone(s.durations)
			slices.Sort(d)
			med, longest = d[len(d)/2].String(), d[len(d)-1].String()
		}
		failed := ""
		if len(s.failedRuns) > 0 {
			failed = strings.Trim(fmt.Sprint(s.failedRuns), "[]")
		}
		fmt.Fprintf(r.out, "%-45s %5d %6d %6d %7d %9s %9s  %s\n", name, s.runs, s.passed, s.failed, s.skipped, med, longest, failed)
		if s.failed > 0 || s.passed == 0 {
			ok = false
		}
		if r.runs > 0 && s.runs != r.runs {
			fmt.Fprintf(r.out, "  %s ran %d times, not %d: the test binary stopped early\n", name, s.runs, r.runs)
			ok = false
		}
	}
	if len(r.order) == 0 {
		fmt.Fprintln(r.out, "no scenario ran")
		ok = false
	}
	if r.pkgFailed && len(r.pkgOutput) > 0 {
		fmt.Fprintln(r.out, "--- the test binary's own output (last lines):")
		for _, l := range r.pkgOutput {
			fmt.Fprintf(r.out, "| %s\n", l)
		}
	}
	if ok {
		fmt.Fprintln(r.out, "every run passed")
	} else {
		fmt.Fprintln(r.out, "SOAK FAILED")
	}
	return ok
}
