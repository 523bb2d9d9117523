package bench

import (
	"math"
	"runtime/metrics"
)

// schedLatencyMetric is the Go runtime's histogram of how long goroutines waited, runnable,
// before they ran. Every daemon instance and (in the cdplane modes) the controller share this
// process's scheduler: where the wait is long, each of them answers events late for a reason a
// cluster, where each runs on its own machine, would not have.
const schedLatencyMetric = "/sched/latencies:seconds"

// schedLatencies reads the runtime's cumulative scheduling-latency histogram.
func schedLatencies() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: schedLatencyMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// SchedLatency is how long this process's goroutines waited to run during a mode: percentiles
// in milliseconds (each the upper bound of the runtime's histogram bucket it falls in).
type SchedLatency struct {
	P50Ms float64 `json:"p50_ms"`
	P90Ms float64 `json:"p90_ms"`
	P99Ms float64 `json:"p99_ms"`
}

// schedLatencySince returns the percentiles of the waits recorded between before and after
// (two readings of one histogram); nil when there were none.
func schedLatencySince(before, after *metrics.Float64Histogram) *SchedLatency {
	if before == nil || after == nil || len(before.Counts) != len(after.Counts) {
		return nil
	}
	counts := make([]uint64, len(after.Counts))
	var total uint64
	for i := range counts {
		counts[i] = after.Counts[i] - before.Counts[i]
		total += counts[i]
	}
	if total == 0 {
		return nil
	}
	at := func(p float64) float64 {
		want := uint64(p * float64(total))
		var n uint64
		for i, c := range counts {
			n += c
			if n > want {
				// Bucket i spans Buckets[i] to Buckets[i+1]; the last may be +Inf.
				upper := after.Buckets[i+1]
				if math.IsInf(upper, 1) {
					upper = after.Buckets[i]
				}
				return upper * 1000
			}
		}
		return after.Buckets[len(after.Buckets)-1] * 1000
	}
	return &SchedLatency{P50Ms: at(0.50), P90Ms: at(0.90), P99Ms: at(0.99)}
}
