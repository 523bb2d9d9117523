package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestIndexIsUpToDate fails when docs/benchmarks/README.md is not what the generator writes from
// the records beside it: a record added, changed or removed without running the generator.
func TestIndexIsUpToDate(t *testing.T) {
	dir := filepath.Join("..", "..", "docs", "benchmarks")
	want, err := Index(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, indexName))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("docs/benchmarks/README.md is out of date; run 'go run ./hack/benchindex' (-want +got):\n%s", diff)
	}
}

const goodFrontMatter = `---
title: 2,304 nodes, all modes
date: 2026-12-03
command: cdplane bench registration --nodes 2304 --timeout 2m --json
nodes: 2,304
modes: floor, cdplane
machine: 2 cores, 24 GiB
summary: cdplane 48.7 s against the floor's 38.9 s (1.25×): ahead
---

# Body
`

func TestReadRecord(t *testing.T) {
	cases := map[string]struct {
		name, data string
		want       entry
		wantErr    string
	}{
		"complete": {
			name: "2026-12-03-registration-2304.md", data: goodFrontMatter,
			want: entry{
				File: "2026-12-03-registration-2304.md", Title: "2,304 nodes, all modes", Date: "2026-12-03",
				Command: "cdplane bench registration --nodes 2304 --timeout 2m --json", Nodes: "2,304",
				Modes: "floor, cdplane", Summary: "cdplane 48.7 s against the floor's 38.9 s (1.25×): ahead",
			},
		},
		"no front matter": {
			name: "2026-12-03-x.md", data: "# Body\n", wantErr: "no front matter",
		},
		"not closed": {
			name: "2026-12-03-x.md", data: strings.TrimSuffix(goodFrontMatter, "---\n\n# Body\n"), wantErr: "not closed",
		},
		"a key missing": {
			name: "2026-12-03-x.md", data: strings.Replace(goodFrontMatter, "machine: 2 cores, 24 GiB\n", "", 1), wantErr: `no "machine"`,
		},
		"an unknown key": {
			name: "2026-12-03-x.md", data: strings.Replace(goodFrontMatter, "machine:", "host:", 1), wantErr: `unknown key "host"`,
		},
		"a key twice": {
			name: "2026-12-03-x.md", data: strings.Replace(goodFrontMatter, "nodes: 2,304\n", "nodes: 2,304\nnodes: 9,216\n", 1), wantErr: `"nodes" given twice`,
		},
		"an empty value": {
			name: "2026-12-03-x.md", data: strings.Replace(goodFrontMatter, "modes: floor, cdplane", "modes:", 1), wantErr: `"modes" is empty`,
		},
		"a line without a key": {
			name: "2026-12-03-x.md", data: strings.Replace(goodFrontMatter, "nodes: 2,304", "2,304 nodes", 1), wantErr: "want \"key: value\"",
		},
		"a name without a date": {
			name: "registration-2304.md", data: goodFrontMatter, wantErr: "does not start with a date",
		},
		"a date other than the name's": {
			name: "2026-12-04-x.md", data: goodFrontMatter, wantErr: "differs from the name's 2026-12-04",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := readRecord(tc.name, []byte(tc.data))
			checkErr(t, err, tc.wantErr)
			if diff := cmp.Diff(tc.want, got); tc.wantErr == "" && diff != "" {
				t.Errorf("readRecord (-want +got):\n%s", diff)
			}
		})
	}
}

// report2304 is shaped as `cdplane bench registration --json` writes it (internal/bench.Report),
// with fields the index does not show left in.
const report2304 = `{
  "nodes": 2304,
  "clique_size": 18,
  "arrival": "burst",
  "floor_seconds": 35.1,
  "floor": {"seconds": 35.1, "writes_per_daemon": 1, "joined": 2304, "instances_retrying": 10},
  "modes": {
    "cdplane": {"seconds": 39.5, "ratio_to_floor": 1.125, "joined": 2304, "controller_writes": 1243},
    "peer-legacy": {"seconds": 120, "ratio_to_floor": 3.42, "timed_out": true, "stopped_by": "timeout", "joined": 0},
    "cdplane-gate-off": {"seconds": 124, "ratio_to_floor": 3.5, "timed_out": true, "stopped_by": "memory", "joined": 435}
  }
}`

func TestReadReport(t *testing.T) {
	cases := map[string]struct {
		name, data string
		want       entry
		wantErr    string
	}{
		"all modes": {
			name: "2026-12-06-registration-2304.json", data: report2304,
			want: entry{
				File: "2026-12-06-registration-2304.json", Title: "2026-12-06-registration-2304.json", Date: "2026-12-06",
				Command: "cdplane bench registration --nodes 2304 --modes cdplane,cdplane-gate-off,peer-legacy --runs 1 --json",
				Nodes:   "2,304", Modes: "floor, cdplane, cdplane-gate-off, peer-legacy",
				Summary: "floor 35.1 s; cdplane 39.5 s (1.12×); cdplane-gate-off 435 of 2,304 joined at 124.0 s (stopped by memory); peer-legacy 0 of 2,304 joined at 120.0 s (stopped by timeout)",
			},
		},
		"a ramp, the floor not finished": {
			name: "2026-12-06-ramp.json",
			data: `{"nodes": 20016, "arrival": "ramp", "nodes_nice": 10, "floor": {"seconds": 480, "timed_out": true, "joined": 19000}, "modes": {}}`,
			want: entry{
				File: "2026-12-06-ramp.json", Title: "2026-12-06-ramp.json", Date: "2026-12-06",
				Command: "cdplane bench registration --nodes 20016 --arrival ramp --nodes-nice 10 --runs 1 --json",
				Nodes:   "20,016", Modes: "floor",
				Summary: "floor 19,000 of 20,016 joined at 480.0 s (stopped by timeout)",
			},
		},
		"three runs: the medians": {
			name: "2026-12-08-runs.json",
			data: `{"nodes": 36, "floor": {"seconds": 1.3, "joined": 36}, "modes": {"cdplane": {"seconds": 0.8, "joined": 36}, "peer-legacy": {"seconds": 60, "joined": 10}},
				"runs": [{}, {}, {}],
				"summary": {
					"floor": {"runs": 3, "finished": 3, "seconds": {"median": 1.25, "min": 1.2, "max": 1.4}},
					"cdplane": {"runs": 3, "finished": 3, "seconds": {"median": 0.75, "min": 0.6, "max": 0.9},
						"ratio_to_floor": {"median": 0.63, "min": 0.5, "max": 0.7}},
					"peer-legacy": {"runs": 3, "finished": 1, "seconds": {"median": 60, "min": 40, "max": 60, "median_is_lower_bound": true},
						"ratio_to_floor": {"median": 48, "min": 30, "max": 50, "median_is_lower_bound": true}}}}`,
			want: entry{
				File: "2026-12-08-runs.json", Title: "2026-12-08-runs.json", Date: "2026-12-08",
				Command: "cdplane bench registration --nodes 36 --modes cdplane,peer-legacy --json",
				Nodes:   "36", Modes: "floor, cdplane, peer-legacy",
				Summary: "median of 3 runs: floor 1.2 s; cdplane 0.8 s (0.63×, 0.50–0.70); peer-legacy ≥60.0 s (≥48.00×, 30.00–50.00), 1 of 3 runs finished",
			},
		},
		"not JSON": {
			name: "2026-12-06-x.json", data: "nodes: 3", wantErr: "not a report",
		},
		"another command's JSON": {
			name: "2026-12-06-slices.json", data: `{"results": []}`, wantErr: "no nodes or floor",
		},
		"a name without a date": {
			name: "registration.json", data: report2304, wantErr: "does not start with a date",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := readReport(tc.name, []byte(tc.data))
			checkErr(t, err, tc.wantErr)
			if diff := cmp.Diff(tc.want, got); tc.wantErr == "" && diff != "" {
				t.Errorf("readReport (-want +got):\n%s", diff)
			}
		})
	}
}

// TestIndexOrdersAndEscapes builds an index from a folder: rows by date then file name, the
// README itself and other files left out, a "|" in a value kept inside its cell, and -check
// failing until the index is written.
func TestIndexOrdersAndEscapes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("2026-12-03-b.md", strings.Replace(goodFrontMatter, "--nodes 2304", "--nodes 2304|9216", 1))
	write("2026-12-03-a.md", goodFrontMatter)
	write("2026-12-06-registration-2304.json", report2304)
	write("plot.svg", "<svg/>")

	if err := run([]string{"-dir", dir, "-check"}, os.Stderr); err == nil || !strings.Contains(err.Error(), "out of date") {
		t.Fatalf("-check before the index is written: got %v, want an error saying it is out of date", err)
	}
	if err := run([]string{"-dir", dir}, os.Stderr); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"-dir", dir, "-check"}, os.Stderr); err != nil {
		t.Fatalf("-check after the index was written: %v", err)
	}
	index, err := os.ReadFile(filepath.Join(dir, indexName))
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, l := range strings.Split(string(index), "\n") {
		if strings.HasPrefix(l, "| 2026") {
			rows = append(rows, l)
		}
	}
	want := []string{
		"| 2026-12-03 | 2,304 | floor, cdplane | `cdplane bench registration --nodes 2304 --timeout 2m --json` | cdplane 48.7 s against the floor's 38.9 s (1.25×): ahead | [2,304 nodes, all modes](2026-12-03-a.md) |",
		"| 2026-12-03 | 2,304 | floor, cdplane | `cdplane bench registration --nodes 2304\\|9216 --timeout 2m --json` | cdplane 48.7 s against the floor's 38.9 s (1.25×): ahead | [2,304 nodes, all modes](2026-12-03-b.md) |",
		"| 2026-12-06 | 2,304 | floor, cdplane, cdplane-gate-off, peer-legacy | `cdplane bench registration --nodes 2304 --modes cdplane,cdplane-gate-off,peer-legacy --runs 1 --json` | floor 35.1 s; cdplane 39.5 s (1.12×); cdplane-gate-off 435 of 2,304 joined at 124.0 s (stopped by memory); peer-legacy 0 of 2,304 joined at 120.0 s (stopped by timeout) | [2026-12-06-registration-2304.json](2026-12-06-registration-2304.json) |",
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("index rows (-want +got):\n%s", diff)
	}

	write("2026-12-07-broken.md", "no front matter\n")
	if err := run([]string{"-dir", dir, "-check"}, os.Stderr); err == nil || !strings.Contains(err.Error(), "2026-12-07-broken.md") {
		t.Errorf("-check with a record without front matter: got %v, want an error naming the file", err)
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 2304: "2,304", 20016: "20,016", 1234567: "1,234,567", -2304: "-2,304"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("got error %v, want one containing %q", err, want)
	}
}
