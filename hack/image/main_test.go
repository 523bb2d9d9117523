package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"cdplane/hack/image/imagebuild"
	"cdplane/internal/version"
)

// writeArchive writes an image archive as make image does, of empty images for arches.
func writeArchive(t *testing.T, path string, arches ...string) {
	t.Helper()
	var adds []mutate.IndexAddendum
	for _, a := range arches {
		img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{OS: "linux", Architecture: a})
		if err != nil {
			t.Fatal(err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: a}}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	if _, err := imagebuild.WriteArchive(path, idx, "docker.io/library/cdplane:"+version.Version, version.Version); err != nil {
		t.Fatal(err)
	}
}

// A release holds the image archive and both packaged charts, and SHA256SUMS in sha256sum's
// format for exactly those.
func TestRelease(t *testing.T) {
	dir := t.TempDir()
	image := filepath.Join(dir, "cdplane-"+version.Version+".oci.tar")
	writeArchive(t, image, imagebuild.Arches...)
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

// A release refuses an image archive without every platform (make image IMAGE_PLATFORMS=…).
func TestReleaseRefusesOnePlatform(t *testing.T) {
	dir := t.TempDir()
	image := filepath.Join(dir, "cdplane-"+version.Version+".oci.tar")
	writeArchive(t, image, "amd64")
	out := filepath.Join(dir, "release")
	err := release(image, out, time.Unix(1700000000, 0))
	if err == nil || !strings.Contains(err.Error(), "holds linux/amd64; a release ships linux/amd64, linux/arm64") {
		t.Fatalf("release of a linux/amd64-only image: %v, want a refusal", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the refused release left %s: %v", out, err)
	}
}
