package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/daemonenv"
	"cdplane/internal/imex"
	"cdplane/internal/metrics"
	"cdplane/internal/version"
)

// MetricsPath is where the metrics endpoint serves.
const MetricsPath = "/metrics"

// Reasons of cdplane_daemon_imex_restarts_total.
const (
	restartExited        = "exited"
	restartConfigChanged = "config_changed"
	restartIndexChanged  = "index_changed"
)

// Reasons of cdplane_daemon_imex_exits_total.
const (
	exitStatus       = "exit_status"
	exitSignal       = "signal"
	exitSessionInUse = "session_in_use"
	exitOther        = "other"
)

// Results of cdplane_daemon_imex_readiness_checks_total.
const (
	checkReady    = "ready"
	checkNotReady = "not_ready"
	checkError    = "error"
)

// Files of cdplane_daemon_imex_config_writes_total.
const (
	fileIMEXConfig  = "imexd.cfg"
	fileNodesConfig = "nodes.cfg"
	fileHosts       = "hosts"
)

// Metrics records one daemon's events in a registry of its own, which its endpoint serves.
// Every method is safe on a nil *Metrics, which records nothing.
type Metrics struct {
	m        *metrics.DaemonMetrics
	registry *prometheus.Registry
	// started is when the daemon started, the origin of the start-to-Ready time.
	started time.Time

	mu sync.Mutex
	// readyOnce is true once the start-to-Ready time is set.
	readyOnce bool
}

// NewMetrics returns the metrics of the daemon cfg describes, in plane controlPlaneID, started at
// started, in a registry of their own. Its counters start at zero for every reason it knows.
func NewMetrics(cfg Config, controlPlaneID string, started time.Time) *Metrics {
	m := metrics.NewDaemonMetrics(metrics.DaemonIdentity{
		ControlPlaneID: controlPlaneID, DomainUID: cfg.CDUID, DomainNamespace: cfg.CDNamespace, DomainName: cfg.CDName,
		NodeName: cfg.NodeName, CliqueID: cfg.CliqueID, Version: version.Version,
	})
	r := prometheus.NewRegistry()
	r.MustRegister(m.Collectors()...)
	m.Info.Set(1)
	m.CliqueIndex.Set(-1)
	for _, reason := range []string{restartExited, restartConfigChanged, restartIndexChanged} {
		m.Restarts.WithLabelValues(reason)
	}
	for _, reason := range []string{exitStatus, exitSignal, exitSessionInUse, exitOther} {
		m.Exits.WithLabelValues(reason)
	}
	for _, result := range []string{checkReady, checkNotReady, checkError} {
		m.ReadinessChecks.WithLabelValues(result)
	}
	for _, file := range []string{fileIMEXConfig, fileNodesConfig, fileHosts} {
		m.ConfigWrites.WithLabelValues(file)
	}
	for _, reason := range []string{cdv1beta1.IMEXBlockedHostIMEXInUse, cdv1beta1.IMEXBlockedFabricError} {
		m.Blocked.WithLabelValues(reason)
	}
	return &Metrics{m: m, registry: r, started: started}
}

// Registry is the registry the daemon's metrics are in; a process adds its Go and process
// collectors to it.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// membership records this node's entry as the membership shows it: self nil when it has none,
// ready whether its status is Ready, at now.
func (m *Metrics) membership(self *imex.Peer, ready bool, now time.Time) {
	if m == nil {
		return
	}
	index := -1
	if self != nil {
		index = self.Index
	}
	m.m.Registered.Set(boolValue(self != nil))
	m.m.CliqueIndex.Set(float64(index))
	ready = ready && self != nil
	m.m.Ready.Set(boolValue(ready))
	if !ready {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.readyOnce {
		m.readyOnce = true
		m.m.StartToReady.WithLabelValues().Set(now.Sub(m.started).Seconds())
	}
}

// configured records IMEX's files as written for kept peers, with skipped entries left out.
func (m *Metrics) configured(kept, skipped int) {
	if m == nil {
		return
	}
	m.m.Peers.Set(float64(kept))
	m.m.PeersLeftOut.Set(float64(skipped))
}

// configWritten records the IMEX files a write changed.
func (m *Metrics) configWritten(changes imex.Changes) {
	if m == nil {
		return
	}
	for file, changed := range map[string]bool{fileIMEXConfig: changes.IMEXConfig, fileNodesConfig: changes.NodesConfig, fileHosts: changes.Hosts} {
		if changed {
			m.m.ConfigWrites.WithLabelValues(file).Inc()
		}
	}
}

// imexStarted records a start of IMEX: err nil when it was launched.
func (m *Metrics) imexStarted(err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.m.StartErrors.Inc()
		return
	}
	m.m.Starts.Inc()
}

// imexRestart records a restart of IMEX the daemon decided on, for reason.
func (m *Metrics) imexRestart(reason string) {
	if m == nil {
		return
	}
	m.m.Restarts.WithLabelValues(reason).Inc()
}

// imexExited records a run that ended on its own with err.
func (m *Metrics) imexExited(err error) {
	if m == nil {
		return
	}
	m.m.Exits.WithLabelValues(exitReason(err)).Inc()
}

// exitReason is the reason label of a run's end.
func exitReason(err error) string {
	var exit *imex.ExitError
	switch {
	case imex.IsSessionInUse(err):
		return exitSessionInUse
	case errors.As(err, &exit) && exit.Signal != "":
		return exitSignal
	case errors.As(err, &exit):
		return exitStatus
	}
	return exitOther
}

// reloaded records a reload sent to IMEX.
func (m *Metrics) reloaded() {
	if m == nil {
		return
	}
	m.m.Reloads.Inc()
}

// readinessChecked records the answer err of a readiness query made at now.
func (m *Metrics) readinessChecked(err error, now time.Time) {
	if m == nil {
		return
	}
	switch {
	case err == nil:
		m.m.ReadinessChecks.WithLabelValues(checkReady).Inc()
		m.m.LastReady.WithLabelValues().Set(float64(now.UnixNano()) / 1e9)
	case errors.Is(err, imex.ErrNotReady):
		m.m.ReadinessChecks.WithLabelValues(checkNotReady).Inc()
	default:
		m.m.ReadinessChecks.WithLabelValues(checkError).Inc()
	}
}

// blocked records that IMEX cannot run on the node, for reason (a cdv1beta1.IMEXBlocked…).
func (m *Metrics) blocked(reason string) {
	if m == nil {
		return
	}
	m.m.Blocked.WithLabelValues(reason).Set(1)
}

// syncFailed records a membership change that could not be applied.
func (m *Metrics) syncFailed() {
	if m == nil {
		return
	}
	m.m.SyncErrors.Inc()
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// MetricsEndpoint serves a daemon's metrics at MetricsPath.
type MetricsEndpoint struct {
	lis net.Listener
	srv *http.Server
	// done is closed once the server stopped serving.
	done chan struct{}
}

// ListenMetrics opens addr (host:port; port 0: any free one) and serves g there at MetricsPath
// until Close. A taken address is an error, before anything else starts.
func ListenMetrics(addr string, g prometheus.Gatherer) (*MetricsEndpoint, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics endpoint on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(MetricsPath, promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	e := &MetricsEndpoint{lis: lis, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		_ = e.srv.Serve(lis) // ends with Close
	}()
	return e, nil
}

// Addr is the address the endpoint listens on.
func (e *MetricsEndpoint) Addr() string { return e.lis.Addr().String() }

// Close stops serving, letting requests in flight finish for a few seconds.
func (e *MetricsEndpoint) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = e.srv.Shutdown(ctx)
	<-e.done
}

// validateMetricsAddress checks a --metrics-bind-address: "0" or empty (off), or host:port with
// a port that is not one of IMEX's (they share the pod's network namespace).
func validateMetricsAddress(addr string) error {
	if metricsOff(addr) {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--%s %q: want host:port or 0: %w", daemonenv.MetricsBindAddressFlag, addr, err)
	}
	return daemonenv.ValidateMetricsBindAddressPort(addr, port)
}

// metricsOff says whether a --metrics-bind-address turns the endpoint off.
func metricsOff(addr string) bool { return addr == "" || addr == "0" }
