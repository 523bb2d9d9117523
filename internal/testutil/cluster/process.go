package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// process is a control-plane component started by the cluster.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func (p *process) stop(timeout time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %s and was killed", p.name, timeout)
	}
}

// startComponent starts kube-controller-manager or kube-scheduler as a cluster administrator,
// serving health checks on a free loopback port, and waits until it reports healthy.
func (c *Cluster) startComponent(ctx context.Context, name string, args ...string) error {
	kubeconfig, err := c.AdminKubeconfig(name)
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	certDir := filepath.Join(c.Dir, name+"-certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return fmt.Errorf("creating %s cert dir: %w", name, err)
	}
	logPath := filepath.Join(c.Dir, name+".log")
	out, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("creating %s log: %w", name, err)
	}
	all := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + certDir,
	}, args...)
	cmd := exec.Command(filepath.Join(c.BinDir, name), all...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = out.Close()
		close(p.done)
	}()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()

	if err := waitHealthy(ctx, p, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), 60*time.Second); err != nil {
		return fmt.Errorf("%s failed to start: %w\n--- last lines of %s:\n%s", name, err, logPath, Tail(logPath, 30))
	}
	return nil
}

func waitHealthy(ctx context.Context, p *process, url string, timeout time.Duration) error {
	hc := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // loopback health check of a test process
	}
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-p.done:
			return fmt.Errorf("exited: %v", p.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		resp, err := hc.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("not healthy after " + timeout.String())
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
