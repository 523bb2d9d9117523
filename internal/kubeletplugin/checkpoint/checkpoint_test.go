package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	"cdplane/internal/atomicfile"
)

func TestCheckpointRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Snapshot()) != 0 {
		t.Fatal("a new checkpoint is not empty")
	}
	started := ClaimEntry{State: PrepareStarted, Namespace: "ns", Name: "a", Kind: "channel", DomainID: "d"}
	done := ClaimEntry{State: PrepareCompleted, Namespace: "ns", Name: "b", Kind: "daemon", DomainID: "d", CDISpec: "x.json",
		Devices: []PreparedDevice{{Requests: []string{"daemon"}, Pool: "n1", Device: "daemon-0", CDIDeviceIDs: []string{"v/c=x"}}}}
	if err := s.Put("a", started); err != nil {
		t.Fatal(err)
	}
	if err := s.Put("b", done); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Put("c", ClaimEntry{State: PrepareAborted}); err != nil {
		t.Fatal(err)
	}

	// What a restarted plugin reads is what was last written.
	again, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[types.UID]ClaimEntry{"b": done, "c": {State: PrepareAborted}}
	if diff := cmp.Diff(want, again.Snapshot()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != File {
		t.Errorf("state directory holds %v, want only %s (no temporary files left)", entries, File)
	}
	info, err := os.Stat(filepath.Join(dir, File))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("checkpoint mode %v, want 0600", info.Mode().Perm())
	}
}

func TestCheckpointFailedWriteKeepsState(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put("a", ClaimEntry{State: PrepareStarted}); err != nil {
		t.Fatal(err)
	}
	// A file where the checkpoint's directory would be makes the write fail.
	notDir := filepath.Join(dir, "not-a-directory")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s.path = filepath.Join(notDir, File)
	if err := s.Put("b", ClaimEntry{State: PrepareStarted}); err == nil {
		t.Fatal("write below a regular file succeeded")
	}
	if _, ok := s.Get("b"); ok {
		t.Error("a failed write changed the in-memory state")
	}
}

func TestReadCheckpointRefusesWhatItCannotTrust(t *testing.T) {
	for name, tc := range map[string]struct {
		data string
		want string
	}{
		"corrupt":       {data: `{"version":1,"claims":`, want: "corrupt"},
		"other version": {data: `{"version":2,"claims":{}}`, want: "version 2"},
	} {
		path := filepath.Join(t.TempDir(), File)
		if err := os.WriteFile(path, []byte(tc.data), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
	}
}

func TestWriteFileAtomicReplaces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	for _, content := range []string{"one", "two"} {
		if err := atomicfile.Write(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Errorf("read %q %v, want %q", got, err, content)
		}
	}
}
