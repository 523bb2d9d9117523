package bench

import (
	"context"
	"errors"
	"math"
	"runtime/metrics"
	"testing"
	"time"
)

func TestNextTickIsTheFirstProbeTickAtOrAfterNow(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	p := 100 * time.Millisecond
	for _, c := range []struct {
		now, want time.Duration // since t0
	}{
		{-time.Second, 0}, // before the first tick: the first tick
		{0, 0},
		{time.Nanosecond, p},
		{99 * time.Millisecond, p},
		{p, p},
		{250 * time.Millisecond, 300 * time.Millisecond},
	} {
		if got := nextTick(t0, t0.Add(c.now), p).Sub(t0); got != c.want {
			t.Errorf("now t0%+v: next tick at t0+%v, want t0+%v", c.now, got, c.want)
		}
	}
}

func TestProbeFindsTheStandInReadyAtATick(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	x := &instantIMEX{}
	done := make(chan error, 1)
	// The probe ran its first tick 250 ms ago: the next one is 50 ms from now.
	t0 := time.Now().Add(-250 * time.Millisecond)
	go func() { done <- x.probe(ctx, t0, 100*time.Millisecond) }()
	if _, err := x.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("probe: %v", err)
	}
	if since := time.Since(t0); since < 300*time.Millisecond {
		t.Errorf("probe passed %v after its first tick, before the tick that could see IMEX started (300ms)", since)
	}
}

func TestProbeWaitsWhileTheStandInIsStopped(t *testing.T) {
	x := &instantIMEX{}
	_, _ = x.Start(context.Background())
	_ = x.Stop(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- x.probe(ctx, time.Now(), time.Millisecond) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("probe of a stopped IMEX: %v, want it to wait until its context ends", err)
	}
}

func TestSchedLatencySinceReadsTheDifference(t *testing.T) {
	buckets := []float64{0, 0.001, 0.010, 0.100, math.Inf(1)}
	before := &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{5, 5, 5, 5}}
	// Since before: 50 waits under 1 ms, 40 of 1-10 ms, 9 of 10-100 ms, 1 longer.
	after := &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{55, 45, 14, 6}}
	got := schedLatencySince(before, after)
	want := &SchedLatency{P50Ms: 10, P90Ms: 100, P99Ms: 100}
	if got == nil || *got != *want {
		t.Errorf("percentiles %+v, want %+v", got, want)
	}
	if got := schedLatencySince(after, after); got != nil {
		t.Errorf("no waits between two equal readings: got %+v, want nil", got)
	}
	if schedLatencies() == nil {
		t.Errorf("the runtime has no %s histogram", schedLatencyMetric)
	}
}
