package endpoints

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
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

// HealthServiceLiveness is the service name the chart's probes ask for (as NVIDIA's chart
// does); the empty name (the whole server) is answered the same.
const HealthServiceLiveness = "liveness"

// healthCheckTimeout bounds one check when the caller set no deadline.
const healthCheckTimeout = 5 * time.Second

// Socket names inside the registration and plugin data directories (the DRA helper's).
const (
	registrationSocket = cdv1beta1.DriverName + "-reg.sock"
	draSocket          = "dra.sock"
)

// healthProbe is what one check saw of the plugin's own sockets.
type healthProbe struct {
	// Stopped: the plugin is stopping or has stopped.
	Stopped bool
	// Info is the registration socket's answer to GetInfo (the kubelet's first call), InfoErr
	// its failure.
	Info    *registerapi.PluginInfo
	InfoErr error
	// DRAErr is the failure of an empty NodePrepareResources on the DRA socket.
	DRAErr error
}

// healthStatus is the rule of the health service: SERVING when the plugin is not stopping, its
// registration socket answers GetInfo as this driver's DRA plugin, and its DRA socket answers
// NodePrepareResources; else NOT_SERVING, with why.
func healthStatus(p healthProbe) (healthpb.HealthCheckResponse_ServingStatus, string) {
	notServing := healthpb.HealthCheckResponse_NOT_SERVING
	switch {
	case p.Stopped:
		return notServing, "the plugin is stopping"
	case p.InfoErr != nil:
		return notServing, fmt.Sprintf("registration socket: GetInfo: %v", p.InfoErr)
	case p.Info == nil:
		return notServing, "registration socket: GetInfo answered nothing"
	case p.Info.Type != registerapi.DRAPlugin || p.Info.Name != cdv1beta1.DriverName:
		return notServing, fmt.Sprintf("registration socket: GetInfo says %s %q, want %s %q",
			p.Info.Type, p.Info.Name, registerapi.DRAPlugin, cdv1beta1.DriverName)
	case p.DRAErr != nil:
		return notServing, fmt.Sprintf("DRA socket: NodePrepareResources: %v", p.DRAErr)
	}
	return healthpb.HealthCheckResponse_SERVING, ""
}

// healthChecker is the plugin's grpc.health.v1 service: each Check calls the plugin's own
// registration and DRA sockets as the kubelet does (GetInfo, an empty NodePrepareResources,
// which touches no claim and takes no lock) and answers by healthStatus.
type healthChecker struct {
	healthpb.UnimplementedHealthServer

	reg     registerapi.RegistrationClient
	dra     drapbv1.DRAPluginClient
	conns   []*grpc.ClientConn
	stopped func() bool
	logger  klog.Logger

	mu   sync.Mutex
	last string // the last NOT_SERVING reason logged, "" while serving
}

// newHealthChecker connects (lazily) to the sockets in registrarDir and pluginDataDir.
func newHealthChecker(logger klog.Logger, registrarDir, pluginDataDir string, stopped func() bool) (*healthChecker, error) {
	h := &healthChecker{stopped: stopped, logger: logger}
	for _, path := range []string{filepath.Join(registrarDir, registrationSocket), filepath.Join(pluginDataDir, draSocket)} {
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, err
		}
		conn, err := grpc.NewClient("unix://"+abs, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			h.close()
			return nil, fmt.Errorf("health check client of %s: %w", abs, err)
		}
		h.conns = append(h.conns, conn)
	}
	h.reg = registerapi.NewRegistrationClient(h.conns[0])
	h.dra = drapbv1.NewDRAPluginClient(h.conns[1])
	return h, nil
}

func (h *healthChecker) close() {
	for _, c := range h.conns {
		_ = c.Close()
	}
}

// Check implements healthpb.HealthServer.
func (h *healthChecker) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if s := req.GetService(); s != "" && s != HealthServiceLiveness {
		return nil, status.Errorf(codes.NotFound, "unknown service %q: this server answers %q and %q", s, "", HealthServiceLiveness)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, healthCheckTimeout)
		defer cancel()
	}
	st, why := healthStatus(h.probe(ctx))
	h.report(why)
	return &healthpb.HealthCheckResponse{Status: st}, nil
}

// List implements healthpb.HealthServer: the status of each service Check answers.
func (h *healthChecker) List(ctx context.Context, _ *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	resp, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return nil, err
	}
	return &healthpb.HealthListResponse{Statuses: map[string]*healthpb.HealthCheckResponse{"": resp, HealthServiceLiveness: resp}}, nil
}

func (h *healthChecker) probe(ctx context.Context) healthProbe {
	p := healthProbe{Stopped: h.stopped()}
	if p.Stopped {
		return p
	}
	p.Info, p.InfoErr = h.reg.GetInfo(ctx, &registerapi.InfoRequest{})
	if p.InfoErr == nil {
		_, p.DRAErr = h.dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{})
	}
	return p
}

// report logs a change of the health: each new reason for NOT_SERVING, and serving again.
func (h *healthChecker) report(why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if why == h.last {
		return
	}
	if why != "" {
		h.logger.Info("Health check: NOT_SERVING", "reason", why)
	} else {
		h.logger.Info("Health check: SERVING")
	}
	h.last = why
}
