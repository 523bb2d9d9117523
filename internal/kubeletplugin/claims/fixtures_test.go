package claims

// A driver root fixture for prepare's tests: a copy of that of package devices, whose tests
// test the driver root itself.

import (
	"os"
	"path/filepath"
	"testing"
)

// driverRootFixture lays out files (relative path: executable) under a new directory.
func driverRootFixture(t *testing.T, files map[string]bool) string {
	t.Helper()
	root := t.TempDir()
	for rel, exec := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if exec {
			mode = 0o755
		}
		if err := os.WriteFile(p, nil, mode); err != nil {
			t.Fatal(err)
		}
	}
	return root
}
