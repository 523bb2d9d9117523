// Command benchindex writes docs/benchmarks/README.md, the index of the benchmark records kept in
// that folder: one row per record (a Markdown file that starts with front matter) and one per
// report of `cdplane bench registration --json` saved there as a .json file. With -check it
// writes nothing and fails when the README is not what it would write (hack/verify.sh runs it
// so; the package's test does the same).
//
//	go run ./hack/benchindex            # rewrite docs/benchmarks/README.md
//	go run ./hack/benchindex -check     # fail when it is out of date
//
// A record's front matter is one "key: value" a line between two "---" lines, every key below
// present and none other (a value is the rest of its line, no quoting):
//
//	---
//	title: 2,304 nodes, all modes
//	date: 2026-12-03
//	command: cdplane bench registration --nodes 2304 --timeout 2m --json
//	nodes: 2,304
//	modes: floor, cdplane, cdplane-gate-off, peer-cliques, peer-legacy
//	machine: 2 cores, 24 GiB; etcd 3.7, kube-apiserver v1.37.2
//	summary: cdplane 48.7 s against the floor's 38.9 s (1.25×)
//	---
//
// A file's name starts with its date (2026-12-03-...): the JSON report does not hold one.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// indexName is the generated file, in the records' folder.
const indexName = "README.md"

// keys are a record's front-matter keys, all required, in the order they are written.
var keys = []string{"title", "date", "command", "nodes", "modes", "machine", "summary"}

// entry is one row of the index.
type entry struct {
	File, Title, Date, Command, Nodes, Modes, Summary string
}

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "benchindex:", err)
		os.Exit(1)
	}
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("benchindex", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", filepath.Join("docs", "benchmarks"), "The records' folder")
	check := fs.Bool("check", false, "Write nothing; fail when the index is not what it would be")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	want, err := Index(*dir)
	if err != nil {
		return err
	}
	path := filepath.Join(*dir, indexName)
	if *check {
		got, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s is out of date; run 'go run ./hack/benchindex' and commit the result", path)
		}
		return nil
	}
	return os.WriteFile(path, want, 0o644)
}

// Index reads every record and report in dir and returns the index it makes.
func Index(dir string) ([]byte, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var entries []entry
	for _, de := range des {
		name := de.Name()
		if de.IsDir() || name == indexName {
			continue
		}
		var read func(string, []byte) (entry, error)
		switch filepath.Ext(name) {
		case ".md":
			read = readRecord
		case ".json":
			read = readReport
		default:
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		e, err := read(name, data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
		}
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b entry) int {
		if c := strings.Compare(a.Date, b.Date); c != 0 {
			return c
		}
		return strings.Compare(a.File, b.File)
	})
	return render(entries), nil
}

// fileDate returns the date a file's name starts with.
func fileDate(name string) (string, error) {
	const layout = "2006-01-02"
	if len(name) < len(layout) {
		return "", fmt.Errorf("the name does not start with a date (%s)", layout)
	}
	d := name[:len(layout)]
	if _, err := time.Parse(layout, d); err != nil {
		return "", fmt.Errorf("the name does not start with a date (%s): %w", layout, err)
	}
	return d, nil
}

// readRecord reads a Markdown record's front matter.
func readRecord(name string, data []byte) (entry, error) {
	lines := strings.Split(strings.TrimSuffix(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n"), "\n")
	if len(lines) == 0 || lines[0] != "---" {
		return entry{}, errors.New(`no front matter: the first line must be "---"`)
	}
	fields := map[string]string{}
	end := -1
	for i, l := range lines[1:] {
		if l == "---" {
			end = i + 1
			break
		}
		k, v, ok := strings.Cut(l, ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok:
			return entry{}, fmt.Errorf("front matter line %d: want \"key: value\", got %q", i+2, l)
		case !slices.Contains(keys, k):
			return entry{}, fmt.Errorf("front matter line %d: unknown key %q (want %s)", i+2, k, strings.Join(keys, ", "))
		case fields[k] != "":
			return entry{}, fmt.Errorf("front matter line %d: %q given twice", i+2, k)
		case v == "":
			return entry{}, fmt.Errorf("front matter line %d: %q is empty", i+2, k)
		}
		fields[k] = v
	}
	if end < 0 {
		return entry{}, errors.New(`front matter not closed by a "---" line`)
	}
	for _, k := range keys {
		if fields[k] == "" {
			return entry{}, fmt.Errorf("front matter has no %q", k)
		}
	}
	d, err := fileDate(name)
	if err != nil {
		return entry{}, err
	}
	if fields["date"] != d {
		return entry{}, fmt.Errorf("front matter date %s differs from the name's %s", fields["date"], d)
	}
	return entry{
		File: name, Title: fields["title"], Date: d, Command: fields["command"],
		Nodes: fields["nodes"], Modes: fields["modes"], Summary: fields["summary"],
	}, nil
}

// report holds the fields of `cdplane bench registration --json` (internal/bench.Report) that the
// index shows; the rest is ignored. A report written before --runs has no runs and no summary:
// it is one run, in floor and modes.
type report struct {
	Nodes        *int              `json:"nodes"`
	CliqueSize   int               `json:"clique_size"`
	Arrival      string            `json:"arrival"`
	NodesNice    int               `json:"nodes_nice"`
	FloorSeconds float64           `json:"floor_seconds"`
	Floor        *result           `json:"floor"`
	Modes        map[string]result `json:"modes"`
	// Runs are only counted.
	Runs    []json.RawMessage  `json:"runs"`
	Summary map[string]summary `json:"summary"`
}

// summary is a mode's figures over the runs (internal/bench.Summary).
type summary struct {
	Runs         int     `json:"runs"`
	Finished     int     `json:"finished"`
	Seconds      spread  `json:"seconds"`
	RatioToFloor *spread `json:"ratio_to_floor"`
}

// spread is internal/bench.Spread.
type spread struct {
	Median           float64 `json:"median"`
	Min              float64 `json:"min"`
	Max              float64 `json:"max"`
	MedianLowerBound bool    `json:"median_is_lower_bound"`
}

// defaultRuns is the default of `cdplane bench registration --runs`.
const defaultRuns = 3

// result is one mode's part of a report (internal/bench.Result).
type result struct {
	Seconds      float64 `json:"seconds"`
	RatioToFloor float64 `json:"ratio_to_floor"`
	TimedOut     bool    `json:"timed_out"`
	StoppedBy    string  `json:"stopped_by"`
	Joined       int     `json:"joined"`
}

// readReport reads a JSON report of `cdplane bench registration --json`.
func readReport(name string, data []byte) (entry, error) {
	var r report
	if err := json.Unmarshal(data, &r); err != nil {
		return entry{}, fmt.Errorf("not a report of 'cdplane bench registration --json': %w", err)
	}
	if r.Nodes == nil || *r.Nodes < 1 || r.Floor == nil {
		return entry{}, errors.New("not a report of 'cdplane bench registration --json': no nodes or floor")
	}
	d, err := fileDate(name)
	if err != nil {
		return entry{}, err
	}
	n := *r.Nodes
	modes := make([]string, 0, len(r.Modes))
	for m := range r.Modes {
		modes = append(modes, m)
	}
	slices.Sort(modes)

	// The command as far as the report records it: its timeout and ramp are not in it.
	cmd := []string{"cdplane bench registration", "--nodes " + strconv.Itoa(n)}
	if len(modes) > 0 {
		cmd = append(cmd, "--modes "+strings.Join(modes, ","))
	}
	if r.Arrival != "" && r.Arrival != "burst" {
		cmd = append(cmd, "--arrival "+r.Arrival)
	}
	if r.CliqueSize != 0 && r.CliqueSize != 18 {
		cmd = append(cmd, "--clique-size "+strconv.Itoa(r.CliqueSize))
	}
	if r.NodesNice != 0 {
		cmd = append(cmd, "--nodes-nice "+strconv.Itoa(r.NodesNice))
	}
	runs := max(len(r.Runs), 1)
	if runs != defaultRuns {
		cmd = append(cmd, "--runs "+strconv.Itoa(runs))
	}
	cmd = append(cmd, "--json")

	var summary []string
	if runs > 1 && r.Summary != nil {
		summary = []string{fmt.Sprintf("median of %d runs: floor %s", runs, medianOutcome(r.Summary["floor"]))}
		for _, m := range modes {
			summary = append(summary, m+" "+medianOutcome(r.Summary[m]))
		}
	} else {
		summary = []string{"floor " + outcome(*r.Floor, n, 0)}
		for _, m := range modes {
			summary = append(summary, m+" "+outcome(r.Modes[m], n, r.Modes[m].RatioToFloor))
		}
	}
	return entry{
		File: name, Title: name, Date: d, Command: strings.Join(cmd, " "),
		Nodes: thousands(n), Modes: strings.Join(append([]string{"floor"}, modes...), ", "),
		Summary: strings.Join(summary, "; "),
	}, nil
}

// outcome says how one mode ended: its time (and ratio to the floor), or how many of n had
// joined when it was stopped.
func outcome(r result, n int, ratio float64) string {
	if r.TimedOut || r.StoppedBy != "" {
		by := r.StoppedBy
		if by == "" {
			by = "timeout"
		}
		return fmt.Sprintf("%s of %s joined at %.1f s (stopped by %s)", thousands(r.Joined), thousands(n), r.Seconds, by)
	}
	s := fmt.Sprintf("%.1f s", r.Seconds)
	if ratio > 0 {
		s += fmt.Sprintf(" (%.2f×)", ratio)
	}
	return s
}

// medianOutcome says how a mode did over the runs: its median time (and median ratio to the
// floor of the same run), and how many runs finished when not all did.
func medianOutcome(s summary) string {
	t := fmt.Sprintf("%.1f s", s.Seconds.Median)
	if s.Seconds.MedianLowerBound {
		t = "≥" + t
	}
	if r := s.RatioToFloor; r != nil && r.Median > 0 {
		bound := ""
		if r.MedianLowerBound {
			bound = "≥"
		}
		t += fmt.Sprintf(" (%s%.2f×, %.2f–%.2f)", bound, r.Median, r.Min, r.Max)
	}
	if s.Finished < s.Runs {
		t += fmt.Sprintf(", %d of %d runs finished", s.Finished, s.Runs)
	}
	return t
}

// thousands writes n with a comma between groups of three digits, as the docs do (2,304).
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// cell makes s safe in a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}

func render(entries []entry) []byte {
	var b bytes.Buffer
	b.WriteString(`<!-- Code generated by "go run ./hack/benchindex"; DO NOT EDIT. -->
# Benchmark records

The runs behind [the capacity guide](../scale.md), one file per run or session of runs, each
holding that run's tables and text as they were written on the day, with the code of that day
(the commit is named where it matters). What holds now is in the guide; these are the record.

A file here is a Markdown record starting with front matter (title, date, command, nodes,
modes, machine, summary: see hack/benchindex) or the output of
` + "`cdplane bench registration --json`" + ` saved as ` + "`<date>-<what>.json`" + ` (its
command is rebuilt from the report, which does not record the timeout or the ramp). After adding
one, run ` + "`go run ./hack/benchindex`" + `; ` + "`make verify`" + ` fails while this index is
out of date.

| date | nodes | modes | command | summary | record |
| --- | --- | --- | --- | --- | --- |
`)
	for _, e := range entries {
		fmt.Fprintf(&b, "| %s | %s | %s | `%s` | %s | [%s](%s) |\n",
			e.Date, cell(e.Nodes), cell(e.Modes), cell(e.Command), cell(e.Summary), cell(e.Title), e.File)
	}
	return b.Bytes()
}
