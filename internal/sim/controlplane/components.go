package controlplane

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// ResidentMemory is the resident memory (VmRSS) of process pid, in bytes.
func ResidentMemory(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseVMRSS(data)
}

// parseVMRSS reads the VmRSS line of /proc/<pid>/status.
func parseVMRSS(status []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("unexpected VmRSS line %q", sc.Text())
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("unexpected VmRSS line %q: %w", sc.Text(), err)
		}
		return kb * 1024, nil
	}
	return 0, errors.New("no VmRSS line")
}

// ComponentMetrics reads the /metrics of a kube-scheduler or kube-controller-manager that Start
// started: on its --secure-port, trusting the self-signed certificate it wrote to its --cert-dir,
// as a client whose certificate the component accepts (the administrator's).
type ComponentMetrics struct {
	url    string
	client *http.Client
}

// NewComponentMetrics returns the reader of p's metrics as the client of cfg (a configuration
// with an inlined client certificate, as AdminConfig's).
func NewComponentMetrics(cfg *rest.Config, p Process) (*ComponentMetrics, error) {
	port, certDir := flagValue(p.Args, "secure-port"), flagValue(p.Args, "cert-dir")
	if port == "" || certDir == "" {
		return nil, fmt.Errorf("%s was started without --secure-port or --cert-dir", p.Name)
	}
	servingPEM, err := os.ReadFile(filepath.Join(certDir, p.Name+".crt"))
	if err != nil {
		return nil, fmt.Errorf("reading %s's serving certificate: %w", p.Name, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(servingPEM) {
		return nil, fmt.Errorf("%s's serving certificate holds no PEM certificate", p.Name)
	}
	cert, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
	if err != nil {
		return nil, fmt.Errorf("the client certificate for %s's metrics: %w", p.Name, err)
	}
	return &ComponentMetrics{
		url: "https://127.0.0.1:" + port + "/metrics",
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}},
	}, nil
}

// Read reads the component's metrics.
func (c *ComponentMetrics) Read(ctx context.Context) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", c.url, resp.Status)
	}
	return ParseMetrics(resp.Body)
}

// flagValue is the value of --name=value in args; empty when absent.
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}
