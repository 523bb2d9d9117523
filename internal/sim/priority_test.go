package sim

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLowerPriority: every thread of the process runs at KubeletNice afterwards (this test
// process's, which harms nothing), and KubeletNice is written to the autogroup file. Not the
// test's real autogroup: that is its whole session's, the shell and `go test` included.
func TestLowerPriority(t *testing.T) {
	autogroup := filepath.Join(t.TempDir(), "autogroup")
	if err := os.WriteFile(autogroup, []byte("/autogroup-1 nice 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := lowerPriority(autogroup); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(autogroup); err != nil || strings.TrimSpace(string(data)) != strconv.Itoa(KubeletNice) {
		t.Errorf("autogroup file %q (%v), want %d written", data, err, KubeletNice)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		data, err := os.ReadFile("/proc/self/task/" + task.Name() + "/stat")
		if err != nil {
			continue // the thread exited
		}
		// The fields after the command's closing parenthesis; nice is the 19th of the line.
		f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
		if nice, _ := strconv.Atoi(f[16]); nice != KubeletNice {
			t.Errorf("thread %s runs at nice %d, want %d", task.Name(), nice, KubeletNice)
		}
	}
	// A kernel without autogroups: nothing to write, no error.
	if err := lowerPriority(filepath.Join(t.TempDir(), "missing", "autogroup")); err != nil {
		t.Errorf("without an autogroup file: %v", err)
	}
}
