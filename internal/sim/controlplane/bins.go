package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BinDirEnv names the environment variable that points at the control-plane binaries.
const BinDirEnv = "CDPLANE_K8S_BINS"

// RepoRoot returns the directory of the cdplane module, found from the working directory.
func RepoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("locating the cdplane module: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("locating the cdplane module: not inside a Go module")
	}
	return filepath.Dir(mod), nil
}

// BinDir returns the directory of the control-plane binaries: $CDPLANE_K8S_BINS when set,
// otherwise the last line printed by the checkout's hack/k8s-bins.sh (which builds them on
// first use).
func BinDir(ctx context.Context) (string, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "hack", "k8s-bins.sh"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building the control-plane binaries (hack/k8s-bins.sh): %w\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}
