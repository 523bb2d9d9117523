package kubelet

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// prober runs the probes of one container instance.
type prober struct {
	runner Runner
	spec   *ContainerSpec
	paths  *PathMap
	ports  []corev1.ContainerPort
	lookup func(string) (string, bool) // env of the container, for $(VAR) in exec commands
	// minPeriod and minTimeout are Config.MinProbePeriod and Config.MinProbeTimeout.
	minPeriod, minTimeout time.Duration
}

// probe runs a probe once: exec through the runner (command expanded and remapped; exit 0
// passes), httpGet (status 200–399), tcpSocket (connect) or grpc (grpc.health.v1 Check answers
// SERVING) against the pod address.
func (p *prober) probe(ctx context.Context, pr *corev1.Probe) error {
	timeout := max(time.Duration(max(pr.TimeoutSeconds, 1))*time.Second, p.minTimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case pr.Exec != nil:
		cmd := make([]string, len(pr.Exec.Command))
		for i, a := range pr.Exec.Command {
			cmd[i] = p.paths.Value(expand(a, p.lookup))
		}
		res, err := p.runner.Exec(ctx, p.spec, cmd)
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("exit code %d: %s", res.ExitCode, truncate(res.Output, 256))
		}
		return nil
	case pr.HTTPGet != nil:
		return p.httpGet(ctx, pr.HTTPGet)
	case pr.TCPSocket != nil:
		port, err := p.port(pr.TCPSocket.Port)
		if err != nil {
			return err
		}
		host := pr.TCPSocket.Host
		if host == "" {
			host = p.spec.PodIP
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return err
		}
		return conn.Close()
	case pr.GRPC != nil:
		return p.grpc(ctx, pr.GRPC)
	}
	return fmt.Errorf("probe kind not simulated (exec, httpGet, tcpSocket and grpc are)")
}

// grpc asks the pod's grpc.health.v1 service for the probe's service, as the kubelet does.
func (p *prober) grpc(ctx context.Context, g *corev1.GRPCAction) error {
	conn, err := grpc.NewClient(net.JoinHostPort(p.spec.PodIP, strconv.Itoa(int(g.Port))), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: ptr.Deref(g.Service, "")})
	if err != nil {
		return fmt.Errorf("gRPC health check: %w", err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("gRPC health check: status %s", resp.GetStatus())
	}
	return nil
}

func (p *prober) httpGet(ctx context.Context, g *corev1.HTTPGetAction) error {
	port, err := p.port(g.Port)
	if err != nil {
		return err
	}
	host := g.Host
	if host == "" {
		host = p.spec.PodIP
	}
	scheme := "http"
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port)), Path: g.Path}
	if u.Path == "" {
		u.Path = "/"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	for _, h := range g.HTTPHeaders {
		if h.Name == "Host" {
			req.Host = h.Value
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true} //nolint:gosec // the kubelet does not verify probe targets either
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("HTTP status %d", resp.StatusCode)
	}
	return nil
}

// port resolves a probe's port: a number, or the name of a container port.
func (p *prober) port(v intstr.IntOrString) (int, error) {
	if v.Type == intstr.Int {
		return v.IntValue(), nil
	}
	for _, cp := range p.ports {
		if cp.Name == v.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("no container port named %q", v.StrVal)
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// failureThreshold is how many consecutive failures fail pr: its failureThreshold, 3 when unset.
func failureThreshold(pr *corev1.Probe) int32 {
	if pr.FailureThreshold == 0 {
		return 3
	}
	return max(pr.FailureThreshold, 1)
}

// failureFloor returns pr, or a copy that fails after least consecutive failures when pr
// would fail after fewer (nil stays nil).
func failureFloor(pr *corev1.Probe, least int32) *corev1.Probe {
	if pr == nil || failureThreshold(pr) >= least {
		return pr
	}
	c := *pr
	c.FailureThreshold = least
	return &c
}

// probeResult counts consecutive results against a probe's thresholds.
type probeResult struct {
	successes, failures int32
}

// record adds one result and returns the thresholded outcome: +1 passed, -1 failed, 0 no
// change yet.
func (r *probeResult) record(pr *corev1.Probe, ok bool) int {
	success := max(pr.SuccessThreshold, 1)
	failure := failureThreshold(pr)
	if ok {
		r.failures = 0
		r.successes++
		if r.successes >= success {
			return 1
		}
		return 0
	}
	r.successes = 0
	r.failures++
	if r.failures >= failure {
		return -1
	}
	return 0
}

// loop runs a probe every period (after its initial delay) until ctx ends, calling report with
// each thresholded outcome; report returns false to stop the loop.
// probePeriod is how often pr runs: its periodSeconds (10 s when unset), at least minPeriod.
func probePeriod(pr *corev1.Probe, minPeriod time.Duration) time.Duration {
	period := 10 * time.Second
	if pr.PeriodSeconds > 0 {
		period = time.Duration(pr.PeriodSeconds) * time.Second
	}
	return max(period, minPeriod)
}

func (p *prober) loop(ctx context.Context, pr *corev1.Probe, report func(ok bool, err error) bool) {
	period := probePeriod(pr, p.minPeriod)
	wait := time.Duration(pr.InitialDelaySeconds) * time.Second
	var r probeResult
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = period
		err := p.probe(ctx, pr)
		if ctx.Err() != nil {
			return
		}
		if out := r.record(pr, err == nil); out != 0 {
			if !report(out > 0, err) {
				return
			}
		}
	}
}
