package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteIfChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "file")
	steps := []struct {
		content     string
		wantChanged bool
	}{
		{"one\n", true},
		{"one\n", false},
		{"two\n", true},
		{"", true},
		{"", false},
	}
	for i, st := range steps {
		changed, err := WriteIfChanged(path, []byte(st.content), 0o640)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if changed != st.wantChanged {
			t.Errorf("step %d: changed %v, want %v", i, changed, st.wantChanged)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if string(got) != st.content {
			t.Errorf("step %d: content %q, want %q", i, got, st.content)
		}
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", info.Mode().Perm())
	}
}

// Write leaves no temporary file behind.
func TestWriteLeavesNoTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	if err := Write(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "f" {
		t.Errorf("directory holds %v, want only f", entries)
	}
}
