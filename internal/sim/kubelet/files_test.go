package kubelet

import (
	"os"
	"path/filepath"
	"testing"
)

// writePodFile creates missing directories, replaces what the file held, sets the mode, and
// leaves no temporary file behind.
func TestWritePodFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a", "b", "token")
	for _, content := range []string{"first", "second, longer"} {
		if err := writePodFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != content {
			t.Errorf("file holds %q, want %q", got, content)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the file: %v", len(entries), entries)
	}
}
