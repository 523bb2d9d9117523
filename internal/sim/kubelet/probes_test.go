package kubelet

import (
	"context"
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
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
