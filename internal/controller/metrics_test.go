package controller

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"cdplane/internal/metrics"
	cdtestutil "cdplane/internal/testutil"
)

// TestLeaderMetric: the gauge is 0 while the replica waits for the lease, 1 once it leads, and
// back to 0 when it stops.
func TestLeaderMetric(t *testing.T) {
	const id = "leader-test"
	g := metrics.ControllerLeader.WithLabelValues(id)
	elected := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&leaderMetric{elected: elected, planeID: id}).Start(ctx) }()

	value := func(want float64) func() (bool, error) {
		return func() (bool, error) { return testutil.ToFloat64(g) == want, nil }
	}
	// Waiting (a standby): 0.
	if v := testutil.ToFloat64(g); v != 0 {
		t.Fatalf("waiting for the lease: %v, want 0", v)
	}
	close(elected)
	cdtestutil.Eventually(t, 5*time.Second, "1 once elected", value(1))
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v := testutil.ToFloat64(g); v != 0 {
		t.Errorf("after the stop: %v, want 0", v)
	}
}

// TestLeaderMetricStoppedBeforeElection: a replica stopped while waiting leaves 0.
func TestLeaderMetricStoppedBeforeElection(t *testing.T) {
	const id = "leader-test-stopped"
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := (&leaderMetric{elected: make(chan struct{}), planeID: id}).Start(ctx); err != nil {
		t.Fatal(err)
	}
	if v := testutil.ToFloat64(metrics.ControllerLeader.WithLabelValues(id)); v != 0 {
		t.Errorf("stopped before election: %v, want 0", v)
	}
}
