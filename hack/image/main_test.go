package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cdplane/internal/version"
)

// A release holds the image archive and both packaged charts, and SHA256SUMS in sha256sum's
// format for exactly those.
func TestRelease(t *testing.T) {
	dir := t.TempDir()
	image := filepath.Join(dir, "cdplane-"+version.Version+".oci.tar")
	if err := os.WriteFile(image, []byte("an image"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "release")
	if err := release(image, out, time.Unix(1700000000, 0)); err != nil {
		t.Fatal(err)
	}
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(sums)), "\n")
	want := []string{"cdplane-" + version.Version + ".oci.tar", "cdplane-" + version.Version + ".tgz", "cdplane-prerequisites-" + version.Version + ".tgz"}
	if len(lines) != len(want) {
		t.Fatalf("SHA256SUMS:\n%s\nwant %d lines", sums, len(want))
	}
	for i, l := range lines {
		data, err := os.ReadFile(filepath.Join(out, want[i]))
		if err != nil {
			t.Fatal(err)
		}
		if w := fmt.Sprintf("%x  %s", sha256.Sum256(data), want[i]); l != w {
			t.Errorf("SHA256SUMS line %d: %q, want %q", i, l, w)
		}
	}
}
