// Package cluster starts and stops the simulated cluster's control plane — etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler from the cached builds — as
// processes detached from the command that started them, bound to loopback only, with their
// own credentials, so that `cdplane sim up` can return while the cluster keeps running and
// `cdplane sim down` can stop exactly what was started (by PID, checked against the binary).
package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Process is one started process.
type Process struct {
	Name   string   `json:"name"`
	PID    int      `json:"pid"`
	Binary string   `json:"binary"`
	Args   []string `json:"args,omitempty"`
	Log    string   `json:"log"`
}

// ControlPlane is a started control plane.
type ControlPlane struct {
	// APIServerURL is https://127.0.0.1:<port>.
	APIServerURL string `json:"apiServerURL"`
	// Kubeconfig is the administrator's kubeconfig.
	Kubeconfig string `json:"kubeconfig"`
	// CAFile is the cluster CA.
	CAFile string `json:"caFile"`
	// Processes in start order.
	Processes []Process `json:"processes"`
}

// Options configure Start.
type Options struct {
	// Dir holds the credentials (pki/), logs (logs/) and etcd's data (etcd/).
	Dir string
	// BinDir holds etcd, kube-apiserver, kube-controller-manager, kube-scheduler.
	BinDir string
	// Progress receives a line per step.
	Progress func(format string, args ...any)
	// Started is called with each process as soon as it runs, so a caller can record it
	// before the next step can fail.
	Started func(Process)
	// NodeMonitorGracePeriod is how long kube-controller-manager waits for a node's Lease
	// renewal before marking the node NotReady; zero: its default (50 s).
	NodeMonitorGracePeriod time.Duration
}

// Start starts the control plane and waits until each component is healthy. On failure it
// stops what it started and returns an error naming the component and the tail of its log.
func Start(ctx context.Context, o Options) (_ *ControlPlane, err error) {
	p := pki{dir: filepath.Join(o.Dir, "pki")}
	if err := p.generate(); err != nil {
		return nil, fmt.Errorf("generating credentials: %w", err)
	}
	logs := filepath.Join(o.Dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, err
	}
	cp := &ControlPlane{CAFile: p.path("ca.crt"), Kubeconfig: filepath.Join(o.Dir, "kubeconfig")}
	defer func() {
		if err != nil {
			_ = Stop(cp.Processes, 15*time.Second)
		}
	}()
	ports, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	etcdClient, etcdPeer, apiPort, kcmPort, schedPort := ports[0], ports[1], ports[2], ports[3], ports[4]
	start := func(name string, args ...string) (Process, error) {
		proc, err := startDetached(name, filepath.Join(o.BinDir, name), filepath.Join(logs, name+".log"), args...)
		if err == nil {
			cp.Processes = append(cp.Processes, proc)
			if o.Started != nil {
				o.Started(proc)
			}
		}
		return proc, err
	}

	o.Progress("Starting etcd")
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	etcd, err := start("etcd", "--data-dir="+filepath.Join(o.Dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", etcdPeer),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", etcdPeer),
		fmt.Sprintf("--initial-cluster=default=http://127.0.0.1:%d", etcdPeer),
		"--unsafe-no-fsync=true", "--quota-backend-bytes=8589934592")
	if err != nil {
		return nil, err
	}
	if err := waitHealthy(ctx, etcd, etcdURL+"/health", nil, time.Minute); err != nil {
		return nil, err
	}

	o.Progress("Starting kube-apiserver")
	cp.APIServerURL = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	api, err := start("kube-apiserver",
		"--etcd-servers="+etcdURL, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(apiPort), "--cert-dir="+filepath.Join(o.Dir, "pki", "apiserver-cert-dir"),
		"--tls-cert-file="+p.path("apiserver.crt"), "--tls-private-key-file="+p.path("apiserver.key"),
		"--client-ca-file="+p.path("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p.path("sa.pub"), "--service-account-signing-key-file="+p.path("sa.key"),
		"--authorization-mode=Node,RBAC", "--allow-privileged=true",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--kubelet-preferred-address-types=InternalIP",
		"--endpoint-reconciler-type=none")
	if err != nil {
		return nil, err
	}
	admin, err := tlsClient(p)
	if err != nil {
		return nil, err
	}
	if err := waitHealthy(ctx, api, cp.APIServerURL+"/readyz", admin, 2*time.Minute); err != nil {
		return nil, err
	}
	if err := writeKubeconfig(cp.Kubeconfig, cp.APIServerURL, p); err != nil {
		return nil, err
	}

	o.Progress("Starting kube-controller-manager and kube-scheduler")
	kcm, err := start("kube-controller-manager", "--kubeconfig="+cp.Kubeconfig,
		"--authentication-kubeconfig="+cp.Kubeconfig, "--authorization-kubeconfig="+cp.Kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(kcmPort), "--leader-elect=false",
		"--controllers=*", "--service-account-private-key-file="+p.path("sa.key"), "--root-ca-file="+p.path("ca.crt"),
		"--use-service-account-credentials=false",
		// The default 20 requests/s makes untainting thousands of new nodes, and creating a
		// DaemonSet's pod on each, take minutes.
		"--kube-api-qps=200", "--kube-api-burst=400", nodeMonitorGracePeriod(o.NodeMonitorGracePeriod))
	if err != nil {
		return nil, err
	}
	sched, err := start("kube-scheduler", "--kubeconfig="+cp.Kubeconfig,
		"--authentication-kubeconfig="+cp.Kubeconfig, "--authorization-kubeconfig="+cp.Kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(schedPort), "--leader-elect=false")
	if err != nil {
		return nil, err
	}
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback health checks of our own self-signed components
	if err := waitHealthy(ctx, kcm, fmt.Sprintf("https://127.0.0.1:%d/healthz", kcmPort), insecure, 2*time.Minute); err != nil {
		return nil, err
	}
	if err := waitHealthy(ctx, sched, fmt.Sprintf("https://127.0.0.1:%d/healthz", schedPort), insecure, 2*time.Minute); err != nil {
		return nil, err
	}
	return cp, nil
}

// StartDetached starts a process in its own session, its output in log, and returns without
// waiting for it.
func StartDetached(name, binary, log string, args ...string) (Process, error) {
	return startDetached(name, binary, log, args...)
}

func startDetached(name, binary, log string, args ...string) (Process, error) {
	out, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return Process{}, err
	}
	defer out.Close()
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return Process{}, fmt.Errorf("starting %s: %w", name, err)
	}
	proc := Process{Name: name, PID: cmd.Process.Pid, Binary: binary, Args: args, Log: log}
	// Reap it if it exits while this process still runs; sim down finds it by PID otherwise.
	go func() { _ = cmd.Wait() }()
	return proc, nil
}

// Restart stops p and starts it again with the same binary, arguments and log, returning the
// new process.
func Restart(p Process, timeout time.Duration) (Process, error) {
	if err := Stop([]Process{p}, timeout); err != nil {
		return Process{}, err
	}
	return startDetached(p.Name, p.Binary, p.Log, p.Args...)
}

// Alive reports whether the process still runs the binary it was started with (a PID reused
// by another program does not count).
func Alive(p Process) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.PID))
	if err != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID))
	if err == nil {
		// A zombie has exited.
		if f := strings.Fields(string(stat)); len(f) > 2 && f[2] == "Z" {
			return false
		}
	}
	return strings.HasPrefix(string(cmdline), p.Binary+"\x00") || string(cmdline) == p.Binary
}

// Stop stops processes in reverse start order: SIGTERM to its process group, SIGKILL after
// timeout. Only processes that still run their recorded binary are signalled.
func Stop(procs []Process, timeout time.Duration) error {
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		if !Alive(p) {
			continue
		}
		_ = syscall.Kill(-p.PID, syscall.SIGTERM)
		deadline := time.Now().Add(timeout)
		for Alive(p) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if Alive(p) {
			_ = syscall.Kill(-p.PID, syscall.SIGKILL)
			for j := 0; Alive(p) && j < 50; j++ {
				time.Sleep(100 * time.Millisecond)
			}
			if Alive(p) {
				errs = append(errs, fmt.Errorf("%s (pid %d) did not stop", p.Name, p.PID))
			}
		}
	}
	return errors.Join(errs...)
}

func waitHealthy(ctx context.Context, p Process, url string, c *http.Client, timeout time.Duration) error {
	if c == nil {
		c = &http.Client{Timeout: 5 * time.Second}
	}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if !Alive(p) {
			return fmt.Errorf("%s exited; its log (%s) ends with:\n%s", p.Name, p.Log, tail(p.Log, 20))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not healthy at %s after %s; its log (%s) ends with:\n%s", p.Name, url, timeout, p.Log, tail(p.Log, 20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func tlsClient(p pki) (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(p.path("admin.crt"), p.path("admin.key"))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(p.path("ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12,
	}}}, nil
}

func writeKubeconfig(path, server string, p pki) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cdplane-sim"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: p.path("ca.crt")}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificate: p.path("admin.crt"), ClientKey: p.path("admin.key")}
	cfg.Contexts["cdplane-sim"] = &clientcmdapi.Context{Cluster: "cdplane-sim", AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = "cdplane-sim"
	return clientcmd.WriteToFile(*cfg, path)
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// nodeMonitorGracePeriod is kube-controller-manager's flag for d; its default when d is zero.
func nodeMonitorGracePeriod(d time.Duration) string {
	if d == 0 {
		d = 50 * time.Second
	}
	return "--node-monitor-grace-period=" + d.String()
}
