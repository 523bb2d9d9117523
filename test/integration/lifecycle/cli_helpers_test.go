package lifecycle

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"cdplane/internal/cli"
)

var (
	cliKubeconfigOnce sync.Once
	cliKubeconfig     string
	cliKubeconfigErr  error
)

// runCLI runs `cdplane args... --kubeconfig <admin>` and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cliKubeconfigOnce.Do(func() {
		cliKubeconfig, cliKubeconfigErr = testCluster.AdminKubeconfig("lifecycle-cli")
	})
	if cliKubeconfigErr != nil {
		t.Fatal(cliKubeconfigErr)
	}
	return runCLIWith(t, cliKubeconfig, args...)
}

// runCLIWith runs `cdplane args... --kubeconfig kubeconfig`.
func runCLIWith(t *testing.T, kubeconfig string, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code := cli.Main(append(args, "--kubeconfig", kubeconfig), &out, &out)
	t.Logf("cdplane %s: exit %d\n%s", strings.Join(args, " "), code, out.String())
	return code, out.String()
}

// cliSays runs the CLI and fails the test unless it exits with code and says every want.
func cliSays(t *testing.T, code int, want []string, args ...string) string {
	t.Helper()
	got, out := runCLI(t, args...)
	if got != code {
		t.Fatalf("cdplane %s: exit %d, want %d:\n%s", strings.Join(args, " "), got, code, out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("cdplane %s: output lacks %q:\n%s", strings.Join(args, " "), w, out)
		}
	}
	return out
}
