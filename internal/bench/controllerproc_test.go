package bench

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func TestControllerArgsRoundTripThroughTheirFlags(t *testing.T) {
	want := ControllerArgs{Kubeconfig: "/k", DriverNamespace: "ns", Run: "bench-1-1", Cliques: false, BatchWindow: 1500 * 1e6, CPUProfile: "/p"}
	var got ControllerArgs
	fs := pflag.NewFlagSet("controller", pflag.ContinueOnError)
	got.AddFlags(fs)
	if err := fs.Parse(want.Flags()); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("parsed %+v from %q, want %+v", got, want.Flags(), want)
	}
	for flag, a := range map[string]ControllerArgs{
		"--kubeconfig":       {DriverNamespace: "ns", Run: "r"},
		"--driver-namespace": {Kubeconfig: "/k", Run: "r"},
		"--run":              {Kubeconfig: "/k", DriverNamespace: "ns"},
	} {
		if err := a.Validate(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("without %s: %v, want an error naming it", flag, err)
		}
	}
}

func TestWriteKubeconfigKeepsTheCredentialsOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	// client-go fills the data from the files it read: both are set, and a kubeconfig with
	// both is refused when read.
	cfg := &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{
		CAFile: "/ca.crt", CAData: []byte("ca"), CertFile: "/c.crt", CertData: []byte("cert"), KeyFile: "/c.key", KeyData: []byte("key")}}
	if err := writeKubeconfig(cfg, path); err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := clientcmd.ConfirmUsable(*kc, ""); err != nil {
		t.Fatalf("the written kubeconfig is refused: %v", err)
	}
	u, c := kc.AuthInfos["bench"], kc.Clusters["bench"]
	if c.Server != cfg.Host || string(c.CertificateAuthorityData) != "ca" || string(u.ClientCertificateData) != "cert" || string(u.ClientKeyData) != "key" {
		t.Errorf("cluster %+v, user %+v: want the address and the inline credentials", c, u)
	}
	// Only files: their names.
	files := &rest.Config{Host: cfg.Host, TLSClientConfig: rest.TLSClientConfig{CAFile: "/ca.crt", CertFile: "/c.crt", KeyFile: "/c.key"}}
	if err := writeKubeconfig(files, path); err != nil {
		t.Fatal(err)
	}
	if kc, err = clientcmd.LoadFromFile(path); err != nil {
		t.Fatal(err)
	}
	if u, c := kc.AuthInfos["bench"], kc.Clusters["bench"]; c.CertificateAuthority != "/ca.crt" || u.ClientCertificate != "/c.crt" || u.ClientKey != "/c.key" {
		t.Errorf("cluster %+v, user %+v: want the file names", c, u)
	}
}

func TestTailBufferKeepsTheEnd(t *testing.T) {
	var b tailBuffer
	_, _ = b.Write([]byte(strings.Repeat("x", 5000)))
	_, _ = b.Write([]byte("the error\n"))
	if s := b.String(); len(s) > 4096 || !strings.HasSuffix(s, "the error") {
		t.Errorf("tail of %d bytes ending %q", len(s), s[max(0, len(s)-20):])
	}
}

// TestControllerProcessSession: with the simulated nodes lowered (Options.NodesNice) the
// controller process runs in a session of its own, a scheduling group apart from theirs;
// otherwise in the benchmark's. A shell stands for the controller: it reports, as the
// controller's report, whether its session id is its own pid, once its stdin closes.
func TestControllerProcessSession(t *testing.T) {
	script := `read -r _ _ _ _ _ sid _ < /proc/$$/stat; cat >/dev/null; if [ "$sid" = "$$" ]; then echo '{"writes":1}'; else echo '{"writes":0}'; fi`
	cfg := &rest.Config{Host: "https://127.0.0.1:6443"}
	for _, own := range []bool{true, false} {
		p, err := startControllerProcess([]string{"sh", "-c", script}, cfg, t.TempDir(), ControllerArgs{}, own)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := p.stop(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if (rep.Writes == 1) != own {
			t.Errorf("ownSession %v: the process leads its own session: %v", own, rep.Writes == 1)
		}
	}
}
