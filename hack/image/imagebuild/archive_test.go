package imagebuild

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// tinyImage is an image for arch whose one layer holds a file saying arch.
func tinyImage(t *testing.T, dir, arch string) v1.Image {
	t.Helper()
	fs := NewFS()
	if err := fs.File(BinDir+"/arch", 0o755, []byte(arch)); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, arch+".tar.gz")
	if err := fs.WriteLayer(p, time.Unix(1700000000, 0)); err != nil {
		t.Fatal(err)
	}
	img, err := newImage(Image{Version: "1.2.3", Commit: "c", Arch: arch, Created: time.Unix(1700000000, 0), Layers: []string{p}, LayerComments: []string{"test"}})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// The archive's index.json names one image, an index of one manifest per platform with its
// platform set; manifest.json tags the first platform's image for docker; the same images give
// the same bytes.
func TestWriteArchiveIndexesPlatforms(t *testing.T) {
	dir := t.TempDir()
	var archives [][]byte
	var digest v1.Hash
	for i := range 2 {
		idx, err := newIndex([]v1.Image{tinyImage(t, dir, "amd64"), tinyImage(t, dir, "arm64")})
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "image.oci.tar")
		if digest, err = WriteArchive(out, idx, "docker.io/library/cdplane:1.2.3", "1.2.3"); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		archives = append(archives, data)
		if i == 1 && !bytes.Equal(archives[0], archives[1]) {
			t.Error("the same images gave two different archives")
		}
	}

	layoutDir := filepath.Join(dir, "layout")
	untarBytes(t, archives[0], layoutDir)
	p, err := layout.FromPath(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].MediaType != types.OCIImageIndex || tm.Manifests[0].Digest != digest ||
		tm.Manifests[0].Annotations["io.containerd.image.name"] != "docker.io/library/cdplane:1.2.3" ||
		tm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "1.2.3" {
		t.Fatalf("index.json: %+v, want one index %s named cdplane:1.2.3", tm.Manifests, digest)
	}
	if got, err := ArchivePlatforms(filepath.Join(dir, "image.oci.tar")); err != nil || !cmp.Equal(got, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("ArchivePlatforms() = %q, %v; want linux/amd64 and linux/arm64", got, err)
	}
	idx, err := top.ImageIndex(digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, m := range im.Manifests {
		platforms = append(platforms, m.Platform.String())
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != m.Platform.Architecture || cf.OS != "linux" {
			t.Errorf("%s: configuration says %s/%s", m.Platform, cf.OS, cf.Architecture)
		}
	}
	if diff := cmp.Diff([]string{"linux/amd64", "linux/arm64"}, platforms); diff != "" {
		t.Errorf("the index's platforms (-want +got):\n%s", diff)
	}

	var docker []tarball.Descriptor
	if err := json.Unmarshal(fileIn(t, archives[0], "manifest.json"), &docker); err != nil {
		t.Fatal(err)
	}
	if len(docker) != 1 || len(docker[0].RepoTags) != 1 || docker[0].RepoTags[0] != "cdplane:1.2.3" {
		t.Fatalf("manifest.json: %+v, want one image tagged cdplane:1.2.3", docker)
	}
	tag, err := name.NewTag("cdplane:1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	dimg, err := tarball.Image(func() (r io.ReadCloser, err error) { return io.NopCloser(bytes.NewReader(archives[0])), nil }, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := dimg.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Architecture != "amd64" {
		t.Errorf("docker's cdplane:1.2.3 is for %s, want the first platform, amd64", cf.Architecture)
	}
}

// untarBytes writes the regular files of a tar into dir.
func untarBytes(t *testing.T, data []byte, dir string) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// fileIn is the content of the file name in a tar.
func fileIn(t *testing.T, data []byte, name string) []byte {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if h.Name == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}
