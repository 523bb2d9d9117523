package controlplane

import (
	"crypto/x509"
	"encoding/pem"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// newTestPlane is a control plane that has credentials and no processes.
func newTestPlane(t *testing.T) *ControlPlane {
	t.Helper()
	p := pki{dir: filepath.Join(t.TempDir(), "pki")}
	if err := p.generate(); err != nil {
		t.Fatal(err)
	}
	return &ControlPlane{APIServerURL: "https://127.0.0.1:6443", CAFile: p.path("ca.crt")}
}

// subject verifies cfg's client certificate against the cluster CA and returns the user and
// groups the apiserver would read from it.
func subject(t *testing.T, cfg *rest.Config) (string, []string) {
	t.Helper()
	block, _ := pem.Decode(cfg.CertData)
	if block == nil {
		t.Fatalf("no certificate in %q", cfg.CertData)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(cfg.CAData) {
		t.Fatal("no CA in the config")
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the client certificate does not verify against the cluster CA: %v", err)
	}
	return cert.Subject.CommonName, cert.Subject.Organization
}

func TestUserConfig(t *testing.T) {
	cp := newTestPlane(t)
	// Users are issued concurrently by parallel tests; each gets its own certificate.
	var wg sync.WaitGroup
	cfgs := make([]*rest.Config, 8)
	errs := make([]error, len(cfgs))
	for i := range cfgs {
		wg.Go(func() { cfgs[i], errs[i] = cp.UserConfig("alice", "team-a", "system:authenticated") })
	}
	wg.Wait()
	serials := map[string]bool{}
	for i, cfg := range cfgs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if cfg.Host != cp.APIServerURL {
			t.Errorf("host %q, want %q", cfg.Host, cp.APIServerURL)
		}
		name, groups := subject(t, cfg)
		if name != "alice" || !cmp.Equal(groups, []string{"team-a", "system:authenticated"}) {
			t.Errorf("user %q in %v", name, groups)
		}
		serials[string(cfg.CertData)] = true
	}
	if len(serials) != len(cfgs) {
		t.Errorf("%d distinct certificates for %d users", len(serials), len(cfgs))
	}
}

func TestWriteUserKubeconfig(t *testing.T) {
	cp := newTestPlane(t)
	path := filepath.Join(t.TempDir(), "bob.kubeconfig")
	if err := cp.WriteUserKubeconfig(path, "bob", "system:masters"); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != cp.APIServerURL {
		t.Errorf("host %q", cfg.Host)
	}
	if name, groups := subject(t, cfg); name != "bob" || !cmp.Equal(groups, []string{"system:masters"}) {
		t.Errorf("user %q in %v", name, groups)
	}
}

func TestUserConfigWithoutCredentials(t *testing.T) {
	cp := &ControlPlane{CAFile: filepath.Join(t.TempDir(), "pki", "ca.crt")}
	if _, err := cp.UserConfig("alice"); err == nil {
		t.Error("a user was issued without a CA")
	}
}
