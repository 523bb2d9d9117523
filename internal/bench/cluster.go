package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"cdplane/internal/sim/controlplane"
)

// Cluster is a control plane a mode runs on.
type Cluster struct {
	// Config is an administrator's.
	Config *rest.Config
	// Stop stops the control plane (Options.FreshCluster's: the benchmark stops it once the
	// mode is measured); nil: nothing to stop.
	Stop func()
	// EtcdMetrics reads etcd's own metrics; nil where the benchmark cannot reach etcd (a
	// cluster given with --kubeconfig), and the etcd figures are then not reported.
	EtcdMetrics func(context.Context) (controlplane.Metrics, error)
}

// ControlPlaneCluster is the Cluster of a control plane started by controlplane.Start, whose
// etcd the benchmark reads through the Unix socket it listens on: etcd serves /metrics on its
// client URL, and that socket is reachable only by the user who started it.
func ControlPlaneCluster(cp *controlplane.ControlPlane, cfg *rest.Config, stop func()) (Cluster, error) {
	for _, p := range cp.Processes {
		if p.Name != "etcd" {
			continue
		}
		sock, err := etcdClientSocket(p.Args)
		if err != nil {
			return Cluster{}, err
		}
		return Cluster{Config: cfg, Stop: stop, EtcdMetrics: etcdMetricsReader(sock)}, nil
	}
	return Cluster{}, fmt.Errorf("the control plane at %s has no etcd process", cp.APIServerURL)
}

// etcdClientSocket is the path of the Unix socket etcd listens on for clients, taken from the
// flags it was started with rather than from where controlplane puts it today.
func etcdClientSocket(args []string) (string, error) {
	for _, a := range args {
		urls, ok := strings.CutPrefix(a, "--listen-client-urls=")
		if !ok {
			continue
		}
		for _, u := range strings.Split(urls, ",") {
			if path, ok := strings.CutPrefix(u, "unix://"); ok && strings.HasPrefix(path, "/") {
				return path, nil
			}
		}
		return "", fmt.Errorf("etcd listens for clients on %s, not an absolute Unix socket", urls)
	}
	return "", fmt.Errorf("etcd was started without --listen-client-urls")
}

// etcdMetricsReader reads etcd's /metrics through its client socket.
func etcdMetricsReader(sock string) func(context.Context) (controlplane.Metrics, error) {
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	return func(ctx context.Context) (controlplane.Metrics, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://etcd/metrics", nil)
		if err != nil {
			return nil, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("reading etcd's metrics: %w", err)
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("reading etcd's metrics: %s", resp.Status)
		}
		return controlplane.ParseMetrics(resp.Body)
	}
}
