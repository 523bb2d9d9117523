package bench

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSpreadOf(t *testing.T) {
	for name, tc := range map[string]struct {
		vals []bounded
		want *Spread
	}{
		"none": {},
		"odd count: the middle value": {
			vals: []bounded{{30, false}, {10, false}, {20, false}},
			want: &Spread{Median: 20, Min: 10, Max: 30, N: 3},
		},
		"even count: the mean of the two middle values": {
			vals: []bounded{{40, false}, {10, false}, {30, false}, {20, false}},
			want: &Spread{Median: 25, Min: 10, Max: 40, N: 4},
		},
		// A run that timed out has the timeout as its seconds: the true value is higher, so
		// it sorts last, and the median of three is still exact.
		"one of three timed out, above the median: exact median, greatest a lower bound": {
			vals: []bounded{{20, false}, {180, true}, {25, false}},
			want: &Spread{Median: 25, Min: 20, Max: 180, N: 3, MaxLowerBound: true},
		},
		"one of two timed out: the median is a lower bound": {
			vals: []bounded{{20, false}, {180, true}},
			want: &Spread{Median: 100, Min: 20, Max: 180, N: 2, MedianLowerBound: true, MaxLowerBound: true},
		},
		"two of three timed out: the median is a lower bound": {
			vals: []bounded{{180, true}, {20, false}, {180, true}},
			want: &Spread{Median: 180, Min: 20, Max: 180, N: 3, MedianLowerBound: true, MaxLowerBound: true},
		},
		"every run timed out: every figure a lower bound": {
			vals: []bounded{{180, true}, {180, true}},
			want: &Spread{Median: 180, Min: 180, Max: 180, N: 2, MedianLowerBound: true, MinLowerBound: true, MaxLowerBound: true},
		},
		// A ratio of a run that timed out may sort below a finished run's: its median is then
		// only a lower bound.
		"a bound below the middle": {
			vals: []bounded{{1.1, true}, {1.5, false}, {2, false}},
			want: &Spread{Median: 1.5, Min: 1.1, Max: 2, N: 3, MedianLowerBound: true, MinLowerBound: true, MaxLowerBound: true},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, spreadOf(tc.vals)); diff != "" {
				t.Errorf("spreadOf(%v) (-want +got):\n%s", tc.vals, diff)
			}
		})
	}
}

func TestNewFigure(t *testing.T) {
	ratio := func(v float64) *float64 { return &v }
	for name, tc := range map[string]struct {
		value       float64
		joined      int
		floor       float64
		floorJoined int
		want        Figure
	}{
		"both joined all: the ratio of the totals": {
			value: 30, joined: 10, floor: 10, floorJoined: 10,
			want: Figure{Value: 30, PerDaemon: 3, Floor: 10, FloorPerDaemon: 1, Ratio: ratio(3)},
		},
		"a mode stopped early: per joined daemon": {
			value: 30, joined: 5, floor: 10, floorJoined: 10,
			want: Figure{Value: 30, PerDaemon: 6, Floor: 10, FloorPerDaemon: 1, Ratio: ratio(6)},
		},
		"the floor's figure is zero: no ratio": {
			value: 30, joined: 10, floor: 0, floorJoined: 10,
			want: Figure{Value: 30, PerDaemon: 3},
		},
		"the floor had no daemon join: no ratio": {
			value: 30, joined: 10, floor: 10, floorJoined: 0,
			want: Figure{Value: 30, PerDaemon: 3, Floor: 10},
		},
		"no daemon of the mode joined: no ratio": {
			value: 30, joined: 0, floor: 10, floorJoined: 10,
			want: Figure{Value: 30, Floor: 10, FloorPerDaemon: 1},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := newFigure(tc.value, tc.joined, tc.floor, tc.floorJoined)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			for _, v := range []float64{got.PerDaemon, got.FloorPerDaemon} {
				if math.IsInf(v, 0) || math.IsNaN(v) {
					t.Errorf("not a number: %+v", got)
				}
			}
			// What -o json prints: a NaN or an infinity would fail to encode.
			if _, err := json.Marshal(got); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestCosts(t *testing.T) {
	cpu := func(v float64) *float64 { return &v }
	floor := Result{JoinedAtEnd: 4, APIServerCPUSeconds: cpu(2), EtcdCPUSeconds: cpu(1), EtcdWALBytes: cpu(400),
		Requests:    map[string]float64{"PATCH pods": 4, "PATCH pods/status": 8},
		WatchEvents: map[string]float64{"pods": 10}, WatchEventBytes: map[string]float64{"pods": 1000}}
	mode := Result{JoinedAtEnd: 4, APIServerCPUSeconds: cpu(6), EtcdCPUSeconds: cpu(2), EtcdWALBytes: cpu(800),
		Requests:    map[string]float64{"PATCH pods": 4, "PATCH pods/status": 8, "APPLY computedomaincliques": 2},
		WatchEvents: map[string]float64{"pods": 10, cliqueResource: 8}, WatchEventBytes: map[string]float64{"pods": 1000, cliqueResource: 4000}}
	cost, requests := costs(mode, floor)
	ratios := map[string]*float64{}
	for name, f := range cost {
		ratios[name] = f.Ratio
	}
	want := map[string]*float64{
		CostAPIServerCPU: cpu(3), CostEtcdCPU: cpu(2), CostEtcdWALBytes: cpu(2), CostRequests: cpu(14.0 / 12),
		CostWatchEvents: cpu(1.8), CostWatchBytes: cpu(5),
		// The floor has no cliques: no ratio.
		CostCliqueWatchEvents: nil, CostCliqueWatchBytes: nil,
	}
	if diff := cmp.Diff(want, ratios); diff != "" {
		t.Errorf("ratios (-want +got):\n%s", diff)
	}
	if f := requests["APPLY computedomaincliques"]; f.Value != 2 || f.Ratio != nil {
		t.Errorf("a request the floor does not make: %+v", f)
	}
	if f := requests["PATCH pods/status"]; f.Ratio == nil || *f.Ratio != 1 {
		t.Errorf("a request both make as often: %+v", f)
	}

	// On a cluster given with --kubeconfig etcd's figures are absent: no figure, not zero.
	floor.EtcdCPUSeconds, floor.EtcdWALBytes = nil, nil
	mode.EtcdCPUSeconds, mode.EtcdWALBytes = nil, nil
	cost, _ = costs(mode, floor)
	for _, name := range []string{CostEtcdCPU, CostEtcdWALBytes} {
		if f, ok := cost[name]; ok {
			t.Errorf("%s without etcd: %+v", name, f)
		}
	}
}

func TestCliqueWatchLeast(t *testing.T) {
	frame := len(`{"type":"ADDED","object":}`)
	for name, tc := range map[string]struct {
		sizes, daemons map[string]int
		want           float64
	}{
		"each daemon receives its clique once": {
			sizes:   map[string]int{"a": 1000, "b": 500},
			daemons: map[string]int{"a": 18, "b": 3},
			want:    float64(18*(1000+frame) + 3*(500+frame)),
		},
		"a clique no daemon has costs nothing": {
			sizes:   map[string]int{"a": 1000, "stray": 700},
			daemons: map[string]int{"a": 2},
			want:    float64(2 * (1000 + frame)),
		},
		"no cliques (the floor)": {
			daemons: map[string]int{"a": 18},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if got := cliqueWatchLeast(tc.sizes, tc.daemons); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSummarizeRuns(t *testing.T) {
	ratio := func(v float64) *float64 { return &v }
	fig := func(r float64) map[string]Figure { return map[string]Figure{CostAPIServerCPU: {Ratio: ratio(r)}} }
	runs := []RunReport{
		{Floor: Result{Seconds: 10}, Modes: map[string]Result{ModeCdplane: {Seconds: 12, Cost: fig(2), CliqueWatchBytesOverLeast: ratio(3)}}},
		{Floor: Result{Seconds: 20}, Modes: map[string]Result{ModeCdplane: {Seconds: 30, Cost: fig(4), CliqueWatchBytesOverLeast: ratio(5)}}},
		// cdplane timed out in this run: its seconds (the timeout) and ratio are lower bounds.
		{Floor: Result{Seconds: 15}, Modes: map[string]Result{ModeCdplane: {Seconds: 60, TimedOut: true, StoppedBy: "timeout", Cost: fig(3)}}},
	}
	got := summarizeRuns(runs)
	want := map[string]Summary{
		modeFloor: {Runs: 3, Finished: 3, Seconds: Spread{Median: 15, Min: 10, Max: 20, N: 3}},
		ModeCdplane: {Runs: 3, Finished: 2,
			Seconds:                   Spread{Median: 30, Min: 12, Max: 60, N: 3, MaxLowerBound: true},
			RatioToFloor:              &Spread{Median: 1.5, Min: 1.2, Max: 4, N: 3, MaxLowerBound: true},
			CostRatios:                map[string]float64{CostAPIServerCPU: 3},
			CliqueWatchBytesOverLeast: ratio(4),
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	// A run whose floor did not finish gives no ratio to it.
	runs[1].Floor.TimedOut = true
	if s := summarizeRuns(runs)[ModeCdplane].RatioToFloor; s == nil || s.N != 2 {
		t.Errorf("ratio over runs with an unfinished floor: %+v", s)
	}
}

// TestOldReportStillReads: a report written before --runs (docs/benchmarks holds some) decodes
// into Report with its figures where they were.
func TestOldReportStillReads(t *testing.T) {
	old := `{"nodes": 36, "clique_size": 18, "arrival": "burst", "floor_seconds": 2.5,
		"floor": {"seconds": 2.5, "joined": 36},
		"modes": {"cdplane": {"seconds": 3, "ratio_to_floor": 1.2, "joined": 36, "requests": {"PATCH pods": 36}}}}`
	var rep Report
	if err := json.Unmarshal([]byte(old), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.FloorSeconds != 2.5 || rep.Modes[ModeCdplane].RatioToFloor != 1.2 || rep.Modes[ModeCdplane].Requests["PATCH pods"] != 36 || len(rep.Runs) != 0 {
		t.Errorf("old report read as %+v", rep)
	}
}

func TestSummaryTable(t *testing.T) {
	ratio := func(v float64) *float64 { return &v }
	rep := &Report{Summary: map[string]Summary{
		modeFloor: {Runs: 2, Finished: 2, Seconds: Spread{Median: 15, Min: 10, Max: 20, N: 2}},
		ModeCdplane: {Runs: 2, Finished: 1,
			Seconds:                   Spread{Median: 100, Min: 20, Max: 180, N: 2, MedianLowerBound: true, MaxLowerBound: true},
			RatioToFloor:              &Spread{Median: 1.25, Min: 1.2, Max: 1.3, N: 2},
			CostRatios:                map[string]float64{CostAPIServerCPU: 1.5, CostWatchBytes: 0.9},
			CliqueWatchBytesOverLeast: ratio(2),
			LastHopMs:                 &Spread{Median: 640, Min: 310, Max: 970, N: 2},
		},
	}}
	want := [][]string{
		{"MODE", "FINISHED", "SECONDS", "× FLOOR", "APISERVER CPU × FLOOR", "ETCD CPU × FLOOR", "ETCD BYTES × FLOOR", "WATCH BYTES × FLOOR", "CLIQUE WATCH BYTES × LEAST", "LAST HOP MS"},
		{"floor", "2/2", "15.00 (10.00–20.00)", "-", "-", "-", "-", "-", "-", "-"},
		// etcd's figures were not measured (a cluster given with --kubeconfig): "-", not 0.
		{"cdplane", "1/2", "≥100.00 (20.00–≥180.00)", "1.25 (1.20–1.30)", "1.50", "-", "-", "0.90", "2.00", "640 (310–970)"},
	}
	if diff := cmp.Diff(want, SummaryTable(rep)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestLastHop: the last hop runs from the latest instance's phase, absolute, whatever each
// instance's start; none without a Ready domain or without an instance in the phase.
func TestLastHop(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	a := &trace{start: t0, at: map[string]time.Duration{phaseJoined: 2 * time.Second, phaseReadySeen: 2500 * time.Millisecond}}
	// Started later, Ready sooner after its start, but last in absolute time.
	b := &trace{start: t0.Add(3 * time.Second), at: map[string]time.Duration{phaseJoined: time.Second, phaseReadySeen: 1200 * time.Millisecond}}
	ready := t0.Add(4700 * time.Millisecond)
	fromReady, fromSeen := lastHop(ready, []*trace{a, nil, b})
	if fromReady == nil || *fromReady != 700 {
		t.Errorf("from the last pod Ready: %v ms, want 700", deref(fromReady))
	}
	if fromSeen == nil || *fromSeen != 500 {
		t.Errorf("from the controller seeing it: %v ms, want 500", deref(fromSeen))
	}
	if r, s := lastHop(time.Time{}, []*trace{a, b}); r != nil || s != nil {
		t.Errorf("a domain never Ready: %v, %v, want none", deref(r), deref(s))
	}
	if r, _ := lastHop(ready, []*trace{{start: t0, at: map[string]time.Duration{}}}); r != nil {
		t.Errorf("no instance Ready: %v, want none", deref(r))
	}
	s := summarizeMode([]Result{{Seconds: 1, LastHopMs: ptrTo(900.0)}, {Seconds: 1}, {Seconds: 1, LastHopMs: ptrTo(300.0)}}, nil)
	if s.LastHopMs == nil || s.LastHopMs.Median != 600 || s.LastHopMs.N != 2 {
		t.Errorf("the summary's last hop: %+v, want the median of the two runs that have one, 600", s.LastHopMs)
	}
}

func deref(p *float64) any {
	if p == nil {
		return "none"
	}
	return *p
}

func ptrTo(v float64) *float64 { return &v }
