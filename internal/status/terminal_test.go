package status

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// Neither /dev/null (a character device) nor a regular file nor a buffer is a terminal: the
// status watch neither colours nor clears what goes there.
func TestIsTerminal(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	file, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for name, w := range map[string]io.Writer{"/dev/null": null, "a file": file, "a buffer": &bytes.Buffer{}} {
		if IsTerminal(w) {
			t.Errorf("%s is taken for a terminal", name)
		}
	}
	t.Setenv("NO_COLOR", "")
	if ColorFor(null) {
		t.Errorf("output to /dev/null is coloured")
	}
}
