package bench

import (
	"fmt"
	"maps"
	"slices"
	"sort"
)

// cliqueResource is the clique's resource as the apiserver's metrics name it.
const cliqueResource = "computedomaincliques"

// Names of the cost figures, in Result.Cost and Summary.CostRatios, in the order reports show
// them.
const (
	CostAPIServerCPU      = "apiserver_cpu_seconds"
	CostEtcdCPU           = "etcd_cpu_seconds"
	CostEtcdWALBytes      = "etcd_wal_write_bytes"
	CostRequests          = "requests"
	CostWatchEvents       = "watch_events"
	CostWatchBytes        = "watch_bytes"
	CostCliqueWatchEvents = "clique_watch_events"
	CostCliqueWatchBytes  = "clique_watch_bytes"
)

// CostFigures lists the cost figures in the order reports show them.
var CostFigures = []string{CostAPIServerCPU, CostEtcdCPU, CostEtcdWALBytes, CostRequests,
	CostWatchEvents, CostWatchBytes, CostCliqueWatchEvents, CostCliqueWatchBytes}

// Figure is one cost of a mode beside the same cost of the floor of the same run. The ratio is
// of the figures per joined daemon, so that a mode stopped before every daemon joined is
// compared for the daemons it served; when both joined all, it is the ratio of the totals.
type Figure struct {
	Value          float64 `json:"value"`
	PerDaemon      float64 `json:"per_daemon"`
	Floor          float64 `json:"floor"`
	FloorPerDaemon float64 `json:"floor_per_daemon"`
	// Ratio is PerDaemon / FloorPerDaemon; absent where the floor's is zero (the floor has no
	// cliques to watch, for instance) or no daemon joined: no ratio means none, not infinity.
	Ratio *float64 `json:"ratio,omitempty"`
}

// newFigure compares a mode's value over joined daemons with the floor's over floorJoined.
func newFigure(value float64, joined int, floor float64, floorJoined int) Figure {
	f := Figure{Value: value, Floor: floor}
	if joined > 0 {
		f.PerDaemon = value / float64(joined)
	}
	if floorJoined > 0 {
		f.FloorPerDaemon = floor / float64(floorJoined)
	}
	if joined > 0 && f.FloorPerDaemon > 0 {
		r := f.PerDaemon / f.FloorPerDaemon
		f.Ratio = &r
	}
	return f
}

// costValues are r's cost figures by name; a figure the run could not measure (etcd's, on a
// cluster given with --kubeconfig) is absent.
func costValues(r Result) map[string]float64 {
	v := map[string]float64{
		CostRequests:          sum(r.Requests),
		CostWatchEvents:       sum(r.WatchEvents),
		CostWatchBytes:        sum(r.WatchEventBytes),
		CostCliqueWatchEvents: r.WatchEvents[cliqueResource],
		CostCliqueWatchBytes:  r.WatchEventBytes[cliqueResource],
	}
	for name, p := range map[string]*float64{CostAPIServerCPU: r.APIServerCPUSeconds, CostEtcdCPU: r.EtcdCPUSeconds, CostEtcdWALBytes: r.EtcdWALBytes} {
		if p != nil {
			v[name] = *p
		}
	}
	return v
}

// costs compares mode's figures with floor's: the cost figures, and the requests by verb and
// resource (a key either made requests under).
func costs(mode, floor Result) (cost, requests map[string]Figure) {
	cost = map[string]Figure{}
	mv, fv := costValues(mode), costValues(floor)
	for name, v := range mv {
		f, ok := fv[name]
		if !ok {
			continue
		}
		cost[name] = newFigure(v, mode.JoinedAtEnd, f, floor.JoinedAtEnd)
	}
	requests = map[string]Figure{}
	for _, k := range slices.Concat(slices.Collect(maps.Keys(mode.Requests)), slices.Collect(maps.Keys(floor.Requests))) {
		requests[k] = newFigure(mode.Requests[k], mode.JoinedAtEnd, floor.Requests[k], floor.JoinedAtEnd)
	}
	return cost, requests
}

func sum(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

// cliqueWatchLeast is the fewest clique watch bytes a registration can cost: each daemon
// receives its final clique once, in one watch event. sizes holds each clique object's JSON as
// the apiserver encodes it (in a list, which encodes an object as a watch event does), by name;
// daemons how many daemons have each clique. apiserver_watch_events_sizes measures the encoded
// event, the object inside {"type":...,"object":...}, so the least counts that frame too, with
// the shortest type a daemon could see ("ADDED"). A clique no daemon has counts nothing.
func cliqueWatchLeast(sizes map[string]int, daemons map[string]int) float64 {
	frame := len(`{"type":"ADDED","object":}`)
	var least float64
	for name, size := range sizes {
		least += float64(daemons[name] * (size + frame))
	}
	return least
}

// Spread is a figure over the runs: its median, least and greatest.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// N is how many runs gave the figure.
	N int `json:"n"`
	// MedianLowerBound, MinLowerBound and MaxLowerBound are set when a run that did not
	// finish (its seconds the timeout, a lower bound) could move the figure up: see spreadOf.
	MedianLowerBound bool `json:"median_is_lower_bound,omitempty"`
	MinLowerBound    bool `json:"min_is_lower_bound,omitempty"`
	MaxLowerBound    bool `json:"max_is_lower_bound,omitempty"`
}

// bounded is one run's value; lower marks a lower bound (a mode that did not finish).
type bounded struct {
	v     float64
	lower bool
}

// spreadOf is the spread of vals (nil for none). A run that did not finish counts with its
// lower bound: as the true value is at least that, sorting by the bound puts it no later than
// it belongs, and the median is exact as long as every bound sorts above the middle value(s);
// otherwise the median is only a lower bound, and says so. The median of an even count is the
// mean of the two middle values.
func spreadOf(vals []bounded) *Spread {
	if len(vals) == 0 {
		return nil
	}
	s := slices.Clone(vals)
	// Stable, bounds after equal exact values: a tie with a bound is where the bound could
	// still move up.
	sort.SliceStable(s, func(i, j int) bool {
		if s[i].v != s[j].v {
			return s[i].v < s[j].v
		}
		return !s[i].lower && s[j].lower
	})
	n := len(s)
	lo, hi := (n-1)/2, n/2
	sp := &Spread{Median: (s[lo].v + s[hi].v) / 2, Min: s[0].v, Max: s[n-1].v, N: n, MinLowerBound: s[0].lower}
	for i, b := range s {
		if b.lower {
			sp.MaxLowerBound = true
			if i <= hi {
				sp.MedianLowerBound = true
			}
		}
	}
	return sp
}

// median is the median of vals (the mean of the two middle ones of an even count); false for
// none.
func median(vals []float64) (float64, bool) {
	if len(vals) == 0 {
		return 0, false
	}
	s := slices.Clone(vals)
	slices.Sort(s)
	n := len(s)
	return (s[(n-1)/2] + s[n/2]) / 2, true
}

// RunReport is one run: the floor and every mode, in that order, each on a fresh control plane
// when the benchmark starts its own.
type RunReport struct {
	FloorSeconds float64           `json:"floor_seconds"`
	Floor        Result            `json:"floor"`
	Modes        map[string]Result `json:"modes"`
}

// Summary is a mode's figures over the runs.
type Summary struct {
	// Runs is how many runs measured the mode, Finished in how many every daemon joined.
	Runs     int    `json:"runs"`
	Finished int    `json:"finished"`
	Seconds  Spread `json:"seconds"`
	// RatioToFloor is over each run's seconds divided by the floor's of the same run, so that
	// the machine's load, which moves both, moves the ratio less; a run whose floor did not
	// finish gives no ratio. Absent for the floor.
	RatioToFloor *Spread `json:"ratio_to_floor,omitempty"`
	// CostRatios are the medians over the runs of each cost figure's ratio to the floor
	// (Figure.Ratio), by figure name; a figure without a ratio in any run is absent.
	CostRatios map[string]float64 `json:"cost_ratios,omitempty"`
	// CliqueWatchBytesOverLeast is the median over the runs of Result.CliqueWatchBytesOverLeast.
	CliqueWatchBytesOverLeast *float64 `json:"clique_watch_bytes_over_least,omitempty"`
	// LastHopMs is over the runs' Result.LastHopMs (cdplane modes that finished).
	LastHopMs *Spread `json:"last_hop_ms,omitempty"`
}

// summarizeRuns summarizes each mode, and the floor (under "floor"), over runs.
func summarizeRuns(runs []RunReport) map[string]Summary {
	out := map[string]Summary{}
	var floor []Result
	for _, r := range runs {
		floor = append(floor, r.Floor)
	}
	if len(floor) > 0 {
		out[modeFloor] = summarizeMode(floor, nil)
	}
	for _, m := range AllModes {
		var res, floors []Result
		for _, r := range runs {
			if mr, ok := r.Modes[m]; ok {
				res, floors = append(res, mr), append(floors, r.Floor)
			}
		}
		if len(res) > 0 {
			out[m] = summarizeMode(res, floors)
		}
	}
	return out
}

// summarizeMode summarizes one mode's results; floors are the floors of the same runs (nil
// for the floor itself).
func summarizeMode(res, floors []Result) Summary {
	s := Summary{Runs: len(res)}
	var secs, ratios []bounded
	ratiosOf := map[string][]float64{}
	var overLeast []float64
	var hops []bounded
	for i, r := range res {
		if r.LastHopMs != nil {
			hops = append(hops, bounded{*r.LastHopMs, false})
		}
		unfinished := r.TimedOut || r.StoppedBy != ""
		if !unfinished {
			s.Finished++
		}
		secs = append(secs, bounded{r.Seconds, unfinished})
		if floors != nil && !floors[i].TimedOut && floors[i].StoppedBy == "" && floors[i].Seconds > 0 {
			ratios = append(ratios, bounded{r.Seconds / floors[i].Seconds, unfinished})
		}
		for name, f := range r.Cost {
			if f.Ratio != nil {
				ratiosOf[name] = append(ratiosOf[name], *f.Ratio)
			}
		}
		if r.CliqueWatchBytesOverLeast != nil {
			overLeast = append(overLeast, *r.CliqueWatchBytesOverLeast)
		}
	}
	s.Seconds = *spreadOf(secs)
	s.RatioToFloor = spreadOf(ratios)
	for name, vals := range ratiosOf {
		if s.CostRatios == nil {
			s.CostRatios = map[string]float64{}
		}
		s.CostRatios[name], _ = median(vals)
	}
	if m, ok := median(overLeast); ok {
		s.CliqueWatchBytesOverLeast = &m
	}
	s.LastHopMs = spreadOf(hops)
	return s
}

// SummaryTable is the summary as text, a row per mode (the floor first) under a header row:
// the seconds and the ratio to the same run's floor as median (min–max), then the medians of
// the cost ratios. "≥" marks a lower bound (a run that did not finish), "-" a figure that has
// no value (the floor against itself, a ratio to a floor figure of zero, etcd's figures on a
// cluster given with --kubeconfig).
func SummaryTable(rep *Report) [][]string {
	rows := [][]string{{"MODE", "FINISHED", "SECONDS", "× FLOOR", "APISERVER CPU × FLOOR", "ETCD CPU × FLOOR",
		"ETCD BYTES × FLOOR", "WATCH BYTES × FLOOR", "CLIQUE WATCH BYTES × LEAST", "LAST HOP MS"}}
	for _, m := range append([]string{modeFloor}, AllModes...) {
		s, ok := rep.Summary[m]
		if !ok {
			continue
		}
		ratio := func(name string) string {
			if r, ok := s.CostRatios[name]; ok {
				return fmt.Sprintf("%.2f", r)
			}
			return "-"
		}
		least := "-"
		if s.CliqueWatchBytesOverLeast != nil {
			least = fmt.Sprintf("%.2f", *s.CliqueWatchBytesOverLeast)
		}
		rows = append(rows, []string{m, fmt.Sprintf("%d/%d", s.Finished, s.Runs), spreadText(&s.Seconds, "%.2f"),
			spreadText(s.RatioToFloor, "%.2f"), ratio(CostAPIServerCPU), ratio(CostEtcdCPU), ratio(CostEtcdWALBytes),
			ratio(CostWatchBytes), least, spreadText(s.LastHopMs, "%.0f")})
	}
	return rows
}

// spreadText is "median (min–max)", "-" for nil; a single run's is its value alone.
func spreadText(s *Spread, format string) string {
	if s == nil {
		return "-"
	}
	v := func(x float64, lower bool) string {
		t := fmt.Sprintf(format, x)
		if lower {
			t = "≥" + t
		}
		return t
	}
	if s.N == 1 {
		return v(s.Median, s.MedianLowerBound)
	}
	return fmt.Sprintf("%s (%s–%s)", v(s.Median, s.MedianLowerBound), v(s.Min, s.MinLowerBound), v(s.Max, s.MaxLowerBound))
}
