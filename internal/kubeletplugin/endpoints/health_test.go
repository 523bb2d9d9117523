package endpoints

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	cdv1beta1 "cdplane/api/v1beta1"
)

func TestHealthStatus(t *testing.T) {
	ours := &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: cdv1beta1.DriverName}
	serving, notServing := healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING
	cases := map[string]struct {
		probe   healthProbe
		want    healthpb.HealthCheckResponse_ServingStatus
		wantWhy string
	}{
		"both sockets answer":          {probe: healthProbe{Info: ours}, want: serving},
		"stopping":                     {probe: healthProbe{Stopped: true, Info: ours}, want: notServing, wantWhy: "stopping"},
		"registration socket refuses":  {probe: healthProbe{InfoErr: errors.New("connection refused")}, want: notServing, wantWhy: "registration socket: GetInfo: connection refused"},
		"registration answers nothing": {probe: healthProbe{}, want: notServing, wantWhy: "GetInfo answered nothing"},
		"another driver's socket": {probe: healthProbe{Info: &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: "gpu.nvidia.com"}},
			want: notServing, wantWhy: `"gpu.nvidia.com"`},
		"not a DRA plugin": {probe: healthProbe{Info: &registerapi.PluginInfo{Type: registerapi.DevicePlugin, Name: cdv1beta1.DriverName}},
			want: notServing, wantWhy: "DevicePlugin"},
		"DRA socket refuses": {probe: healthProbe{Info: ours, DRAErr: errors.New("no such file")}, want: notServing, wantWhy: "DRA socket: NodePrepareResources: no such file"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, why := healthStatus(tc.probe)
			if got != tc.want || !strings.Contains(why, tc.wantWhy) || (got == serving) != (why == "") {
				t.Errorf("healthStatus = %s %q, want %s containing %q", got, why, tc.want, tc.wantWhy)
			}
		})
	}
}

// fakeRegistration and fakeDRA stand for the DRA helper's servers on the plugin's sockets.
type fakeRegistration struct {
	registerapi.UnimplementedRegistrationServer
}

func (fakeRegistration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: cdv1beta1.DriverName}, nil
}

type fakeDRA struct {
	drapbv1.UnimplementedDRAPluginServer
	calls atomic.Int32
}

func (f *fakeDRA) NodePrepareResources(_ context.Context, req *drapbv1.NodePrepareResourcesRequest) (*drapbv1.NodePrepareResourcesResponse, error) {
	f.calls.Add(1)
	if len(req.Claims) > 0 {
		return nil, status.Error(codes.InvalidArgument, "the health check must prepare no claim")
	}
	return &drapbv1.NodePrepareResourcesResponse{}, nil
}

func serveUnix(t *testing.T, path string, register func(*grpc.Server)) *grpc.Server {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return s
}

// TestHealthService asks the health service over TCP on 127.0.0.1, as the kubelet's grpc probe
// does, while the plugin's sockets answer, after the DRA socket went away, and while stopping.
func TestHealthService(t *testing.T) {
	// Unix socket paths are limited to 108 bytes: a short directory, not t.TempDir().
	dir, err := os.MkdirTemp("", "kph")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	serveUnix(t, filepath.Join(dir, registrationSocket), func(s *grpc.Server) {
		registerapi.RegisterRegistrationServer(s, fakeRegistration{})
	})
	dra := &fakeDRA{}
	draServer := serveUnix(t, filepath.Join(dir, draSocket), func(s *grpc.Server) { drapbv1.RegisterDRAPluginServer(s, dra) })

	var stopped atomic.Bool
	eps, err := Listen("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eps.Stop)
	ctx := klog.NewContext(context.Background(), klog.Background())
	if err := eps.Serve(ctx, dir, dir, stopped.Load); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr(eps.healthLis), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	client := healthpb.NewHealthClient(conn)
	check := func(service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		return resp.GetStatus(), err
	}
	for _, service := range []string{"", HealthServiceLiveness} {
		if got, err := check(service); err != nil || got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("service %q: %s, %v; want SERVING", service, got, err)
		}
	}
	if dra.calls.Load() != 2 {
		t.Errorf("the DRA socket got %d calls, want one per check (2)", dra.calls.Load())
	}
	if _, err := check("readiness"); status.Code(err) != codes.NotFound {
		t.Errorf("unknown service: %v, want NotFound", err)
	}

	draServer.Stop()
	if got, err := check(HealthServiceLiveness); err != nil || got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("without the DRA socket: %s, %v; want NOT_SERVING", got, err)
	}
	stopped.Store(true)
	if got, err := check(HealthServiceLiveness); err != nil || got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("stopping: %s, %v; want NOT_SERVING", got, err)
	}
}
