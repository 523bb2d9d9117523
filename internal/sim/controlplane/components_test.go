package controlplane

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

func TestParseVMRSS(t *testing.T) {
	cases := map[string]struct {
		status  string
		want    uint64
		wantErr bool
	}{
		"kernel format": {status: "Name:\tkube-scheduler\nVmPeak:\t  999 kB\nVmRSS:\t   51200 kB\nRssAnon:\t 1 kB\n", want: 50 << 20},
		"no VmRSS":      {status: "Name:\tzombie\nState:\tZ (zombie)\n", wantErr: true},
		"other unit":    {status: "VmRSS:\t 5 MB\n", wantErr: true},
		"not a number":  {status: "VmRSS:\t x kB\n", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := parseVMRSS([]byte(tc.status))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parseVMRSS = %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
	if rss, err := ResidentMemory(os.Getpid()); err != nil || rss < 1<<20 {
		t.Errorf("this test's resident memory: %d, %v", rss, err)
	}
}

// TestComponentMetrics serves metrics as a component started by Start does (a serving
// certificate in its --cert-dir, client certificates of the cluster CA required) and reads them
// with the administrator's certificate.
func TestComponentMetrics(t *testing.T) {
	p := pki{dir: t.TempDir()}
	if err := p.generate(); err != nil {
		t.Fatal(err)
	}
	serving, err := tls.LoadX509KeyPair(p.path("apiserver.crt"), p.path("apiserver.key"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(p.path("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	clients := x509.NewCertPool()
	clients.AppendCertsFromPEM(caPEM)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, "# TYPE go_memstats_heap_inuse_bytes gauge\ngo_memstats_heap_inuse_bytes 12345\n")
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving}, ClientCAs: clients, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	defer srv.Close()
	// The component writes its serving certificate and the CA that signed it to one file.
	certDir := t.TempDir()
	servingPEM, err := os.ReadFile(p.path("apiserver.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(certDir, "kube-scheduler.crt"), append(servingPEM, caPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	port := srv.Listener.Addr().String()[strings.LastIndex(srv.Listener.Addr().String(), ":")+1:]
	proc := Process{Name: "kube-scheduler", Args: []string{"--kubeconfig=x", "--secure-port=" + port, "--cert-dir=" + certDir}}
	certData, _ := os.ReadFile(p.path("admin.crt"))
	keyData, _ := os.ReadFile(p.path("admin.key"))
	admin := &rest.Config{TLSClientConfig: rest.TLSClientConfig{CertData: certData, KeyData: keyData}}

	cm, err := NewComponentMetrics(admin, proc)
	if err != nil {
		t.Fatal(err)
	}
	m, err := cm.Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Sum("go_memstats_heap_inuse_bytes", nil); got != 12345 {
		t.Errorf("heap in use %v, want 12345", got)
	}

	if _, err := NewComponentMetrics(admin, Process{Name: "kube-scheduler", Args: []string{"--cert-dir=" + certDir}}); err == nil ||
		!strings.Contains(err.Error(), "kube-scheduler was started without --secure-port") {
		t.Errorf("a process without --secure-port: %v", err)
	}
	if _, err := NewComponentMetrics(&rest.Config{}, proc); err == nil || !strings.Contains(err.Error(), "client certificate") {
		t.Errorf("a configuration without a client certificate: %v", err)
	}
}
