// Package endpoints serves the kubelet plugin's sockets and TCP endpoints: the listener of its
// registration and DRA sockets (ListenSocket, for the DRA helper), the gRPC health service the
// kubelet's probes ask, and the Prometheus metrics endpoint (Set).
package endpoints

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/klog/v2"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// MetricsPath is where the metrics endpoint serves.
const MetricsPath = "/metrics"

// Set is the plugin's TCP endpoints: the gRPC health service and the Prometheus metrics
// (controller-runtime's registry, which holds internal/metrics and client-go's request metrics).
// Either is nil when off.
type Set struct {
	healthLis, metricsLis net.Listener
	health                *grpc.Server
	checker               *healthChecker
	metrics               *http.Server
}

// Listen opens the listeners of the endpoints whose address is not empty, so that a taken port
// fails the start before the plugin touches anything.
func Listen(healthAddr, metricsAddr string) (*Set, error) {
	e := &Set{}
	var err error
	if healthAddr != "" {
		if e.healthLis, err = net.Listen("tcp", healthAddr); err != nil {
			return nil, fmt.Errorf("health service on %s: %w", healthAddr, err)
		}
	}
	if metricsAddr != "" {
		if e.metricsLis, err = net.Listen("tcp", metricsAddr); err != nil {
			e.Stop()
			return nil, fmt.Errorf("metrics endpoint on %s: %w", metricsAddr, err)
		}
	}
	return e, nil
}

// Serve starts serving the open endpoints: health checks against the sockets in registrarDir
// and pluginDataDir (stopped says when the plugin stops), metrics from controller-runtime's
// registry.
func (e *Set) Serve(ctx context.Context, registrarDir, pluginDataDir string, stopped func() bool) error {
	logger := klog.FromContext(ctx)
	if e.healthLis != nil {
		checker, err := newHealthChecker(logger.WithName("health"), registrarDir, pluginDataDir, stopped)
		if err != nil {
			return err
		}
		e.checker, e.health = checker, grpc.NewServer()
		healthpb.RegisterHealthServer(e.health, checker)
		go func() {
			if err := e.health.Serve(e.healthLis); err != nil {
				logger.Error(err, "Health service stopped")
			}
		}()
		logger.Info("Serving the gRPC health service", "address", e.healthLis.Addr().String(), "services", []string{"", HealthServiceLiveness})
	}
	if e.metricsLis != nil {
		mux := http.NewServeMux()
		mux.Handle(MetricsPath, promhttp.HandlerFor(crmetrics.Registry, promhttp.HandlerOpts{}))
		e.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := e.metrics.Serve(e.metricsLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "Metrics endpoint stopped")
			}
		}()
		logger.Info("Serving metrics", "address", e.metricsLis.Addr().String(), "path", MetricsPath)
	}
	return nil
}

// Stop closes the endpoints; safe on a nil or partly started one.
func (e *Set) Stop() {
	if e == nil {
		return
	}
	if e.health != nil {
		e.health.Stop()
	} else if e.healthLis != nil {
		_ = e.healthLis.Close()
	}
	if e.checker != nil {
		e.checker.close()
	}
	if e.metrics != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.metrics.Shutdown(ctx)
	} else if e.metricsLis != nil {
		_ = e.metricsLis.Close()
	}
}

// HealthAddress is the address the health service listens on, "" when it is off.
func (e *Set) HealthAddress() string { return addr(e.healthLis) }

// MetricsAddress is the address the metrics endpoint listens on, "" when it is off.
func (e *Set) MetricsAddress() string { return addr(e.metricsLis) }

// addr is a listener's address, "" when it is off.
func addr(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}
