package debugbundle

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func TestNodeFiles(t *testing.T) {
	state, cdiRoot := t.TempDir(), t.TempDir()
	write := func(dir, name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(state, "checkpoint.json", `{"version":1}`)
	write(state, "checkpoint.json.unreadable-20261207T000000Z", `garbage`)
	write(state, "other.json", `not ours`)
	if err := os.Mkdir(filepath.Join(state, "domains"), 0o700); err != nil {
		t.Fatal(err)
	}
	write(cdiRoot, "k8s.compute-domain.nvidia.com-claim_1234.json", `{"cdiVersion":"0.6.0"}`)
	write(cdiRoot, "k8s.gpu.nvidia.com-claim_1.json", `another driver's`)

	var buf bytes.Buffer
	if err := WriteNodeFiles(&buf, state, cdiRoot); err != nil {
		t.Fatal(err)
	}
	got, err := ReadNodeFiles(&buf)
	if err != nil {
		t.Fatal(err)
	}
	want := []NodeFile{
		{Name: "checkpoint/checkpoint.json", Data: []byte(`{"version":1}`)},
		{Name: "checkpoint/checkpoint.json.unreadable-20261207T000000Z", Data: []byte(`garbage`)},
		{Name: "cdi/k8s.compute-domain.nvidia.com-claim_1234.json", Data: []byte(`{"cdiVersion":"0.6.0"}`)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("node files (-want +got):\n%s", diff)
	}

	buf.Reset()
	if err := WriteNodeFiles(&buf, filepath.Join(state, "missing"), filepath.Join(cdiRoot, "missing")); err != nil {
		t.Fatalf("missing directories: %v", err)
	}
	if got, err := ReadNodeFiles(&buf); err != nil || len(got) != 0 {
		t.Errorf("missing directories: %v, %v", got, err)
	}
}

func TestPluginArg(t *testing.T) {
	ct := &corev1.Container{Command: []string{"cdplane-kubelet-plugin"}, Args: []string{"--state-dir=/s", "--cdi-root", "/c"}}
	if got := pluginArg(ct, "state-dir", "def"); got != "/s" {
		t.Errorf("state-dir %q", got)
	}
	if got := pluginArg(ct, "cdi-root", "def"); got != "/c" {
		t.Errorf("cdi-root %q", got)
	}
	if got := pluginArg(ct, "other", "def"); got != "def" {
		t.Errorf("default %q", got)
	}
}
