package kubelet

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

func TestProbeThresholds(t *testing.T) {
	pr := &corev1.Probe{SuccessThreshold: 2, FailureThreshold: 2}
	var r probeResult
	var got []int
	for _, ok := range []bool{true, true, false, true, false, false, true} {
		got = append(got, r.record(pr, ok))
	}
	if diff := cmp.Diff([]int{0, 1, 0, 0, 0, -1, 0}, got); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
}

// TestFailureFloor: under a floor of 10, a liveness probe with failureThreshold 3 (or unset,
// which means 3) fails at its 10th consecutive failure, not its 3rd; one at or above the floor,
// and every probe without a floor, keep their own threshold; the spec is not changed.
func TestFailureFloor(t *testing.T) {
	failsAt := func(pr *corev1.Probe) int {
		var r probeResult
		for i := 1; i <= 100; i++ {
			if r.record(pr, false) < 0 {
				return i
			}
		}
		return 0
	}
	three, unset, twelve := &corev1.Probe{FailureThreshold: 3}, &corev1.Probe{}, &corev1.Probe{FailureThreshold: 12}
	for _, c := range []struct {
		pr    *corev1.Probe
		least int32
		want  int
	}{
		{three, 0, 3}, {unset, 0, 3}, {twelve, 0, 12},
		{three, 10, 10}, {unset, 10, 10}, {twelve, 10, 12},
	} {
		if got := failsAt(failureFloor(c.pr, c.least)); got != c.want {
			t.Errorf("failureThreshold %d under a floor of %d: failed at failure %d, want %d", c.pr.FailureThreshold, c.least, got, c.want)
		}
	}
	if three.FailureThreshold != 3 || unset.FailureThreshold != 0 {
		t.Errorf("the floor changed the spec: %d, %d", three.FailureThreshold, unset.FailureThreshold)
	}
	if failureFloor(nil, 10) != nil {
		t.Error("no probe became a probe")
	}
}

// TestGRPCProbe: a grpc probe passes while the pod's grpc.health.v1 service answers SERVING for
// the probe's service, and fails otherwise.
func TestGRPCProbe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, hs := grpc.NewServer(), health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	hs.SetServingStatus("liveness", healthpb.HealthCheckResponse_SERVING)
	port := int32(l.Addr().(*net.TCPAddr).Port)
	p := &prober{spec: &ContainerSpec{PodIP: "127.0.0.1"}}
	probe := func(service string) error {
		return p.probe(context.Background(), &corev1.Probe{TimeoutSeconds: 5,
			ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: port, Service: ptr.To(service)}}})
	}
	if err := probe("liveness"); err != nil {
		t.Errorf("SERVING: %v", err)
	}
	if err := probe("other"); err == nil {
		t.Error("unknown service: passed")
	}
	hs.SetServingStatus("liveness", healthpb.HealthCheckResponse_NOT_SERVING)
	if err := probe("liveness"); err == nil {
		t.Error("NOT_SERVING: passed")
	}
}

func TestProbePeriod(t *testing.T) {
	for _, c := range []struct {
		period int32
		floor  time.Duration
		want   time.Duration
	}{{0, 0, 10 * time.Second}, {2, 0, 2 * time.Second}, {2, 24 * time.Second, 24 * time.Second}, {30, 24 * time.Second, 30 * time.Second}, {0, 24 * time.Second, 24 * time.Second}} {
		if got := probePeriod(&corev1.Probe{PeriodSeconds: c.period}, c.floor); got != c.want {
			t.Errorf("periodSeconds %d, floor %s: every %s, want %s", c.period, c.floor, got, c.want)
		}
	}
}

// TestProbeLoopKeepsTheFloor: a probe whose period is shorter than the kubelet's MinProbePeriod
// runs no more often than that floor.
func TestProbeLoopKeepsTheFloor(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	var mu sync.Mutex
	var at []time.Time
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			at = append(at, time.Now())
			mu.Unlock()
			_ = conn.Close()
		}
	}()
	const floor = 1500 * time.Millisecond
	p := &prober{spec: &ContainerSpec{PodIP: "127.0.0.1"}, minPeriod: floor}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.loop(ctx, &corev1.Probe{PeriodSeconds: 1, TimeoutSeconds: 5, ProbeHandler: corev1.ProbeHandler{
			TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt(l.Addr().(*net.TCPAddr).Port)}}},
			func(bool, error) bool { return true })
	}()
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(at) >= 3, nil
	})
	cancel()
	<-done
	if err != nil {
		t.Fatalf("three probes: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < floor {
			t.Errorf("probe %d came %s after the one before, want at least the floor %s", i, gap, floor)
		}
	}
}

// TestProbeTimeoutFloor: a probe whose timeout is shorter than the kubelet's MinProbeTimeout gets
// that long to answer; without the floor its own timeout holds.
func TestProbeTimeoutFloor(t *testing.T) {
	runner, _ := toolRouter(t, "#!/bin/sh\nsleep 1.2\n")
	pr := &corev1.Probe{TimeoutSeconds: 1, ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"tool"}}}}
	p := &prober{runner: runner, spec: &ContainerSpec{Image: "example.com/tool:v1"}, paths: &PathMap{}}
	if err := p.probe(context.Background(), pr); err == nil {
		t.Error("a 1.2 s answer passed a 1 s timeout without a floor")
	}
	p.minTimeout = time.Minute
	if err := p.probe(context.Background(), pr); err != nil {
		t.Errorf("a 1.2 s answer under a 1-minute floor: %v", err)
	}
}
