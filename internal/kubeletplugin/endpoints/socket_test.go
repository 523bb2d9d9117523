package endpoints

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestListenSocketRemovesOnlyItsOwnSocket: a listener closed after another took its path over
// leaves the other's socket; the last owner's Close removes it; a second Close is harmless.
func TestListenSocketRemovesOnlyItsOwnSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "sock") // short: Unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "reg.sock")
	ctx := context.Background()

	old, err := ListenSocket(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	newer, err := ListenSocket(ctx, path) // replaces the old one's file
	if err != nil {
		t.Fatalf("listening over a socket another listener serves: %v", err)
	}
	if err := old.Close(); err != nil {
		t.Fatalf("closing the replaced listener: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the replaced listener's Close removed the newer socket: %v", err)
	}
	if err := newer.Close(); err != nil {
		t.Fatalf("closing the newer listener: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the socket is still there after its owner closed: %v", err)
	}
	_ = newer.Close()
}
