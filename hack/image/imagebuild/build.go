// Package imagebuild assembles cdplane's container image without a container engine or a
// registry, as distroless images are made: a base layer from pinned Debian packages (the C
// library the cgo binaries need, CA certificates, users and groups) and a layer of the binaries
// that `go build` makes, written as one archive that ctr, kind and docker all load. The same
// inputs (sources, lock file, Go toolchain, SOURCE_DATE_EPOCH) give the same image digest.
//
// It is a build tool (hack/image), not part of the product.
package imagebuild

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// BinDir is where the binaries lie in the image (on PATH).
const BinDir = "usr/local/bin"

// Options are one image build.
type Options struct {
	// Repo is the repository root.
	Repo string
	// Version and Commit label the image and the binaries; Name is the image's reference, e.g.
	// "docker.io/library/cdplane:0.1.0", and Tag its tag.
	Version, Commit, Name, Tag string
	// Epoch is every time in the image (SOURCE_DATE_EPOCH).
	Epoch time.Time
	// Lock is the lock file of the base packages; CacheDir keeps the downloaded .debs.
	Lock, CacheDir string
	// Out is the archive to write.
	Out string
	// Log receives progress.
	Log io.Writer
}

// Result is what a build made.
type Result struct {
	Digest v1.Hash
	// Binaries are the commands in the image, in BinDir.
	Binaries []string
}

// Build builds the binaries and the image archive.
func Build(o Options) (Result, error) {
	work, err := os.MkdirTemp("", "cdplane-image-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(work)
	bins := filepath.Join(work, "bin")
	cmds, err := BuildBinaries(o.Repo, bins, o.Commit, o.Log)
	if err != nil {
		return Result{}, err
	}
	d, err := Assemble(o, bins, cmds)
	return Result{Digest: d, Binaries: cmds}, err
}

// Assemble writes the image archive from the binaries cmds in binDir.
func Assemble(o Options, binDir string, cmds []string) (v1.Hash, error) {
	lock, err := os.ReadFile(o.Lock)
	if err != nil {
		return v1.Hash{}, err
	}
	pkgs, err := ParseLock(lock)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("%s: %w", o.Lock, err)
	}
	debs := map[string]string{}
	var order []string
	for _, p := range pkgs {
		if p.Arch != runtime.GOARCH && p.Arch != "all" {
			return v1.Hash{}, fmt.Errorf("%s: package %s is for %s, this build is for %s", o.Lock, p.Name, p.Arch, runtime.GOARCH)
		}
		if debs[p.Name], err = Fetch(p, o.CacheDir, o.Log); err != nil {
			return v1.Hash{}, err
		}
		order = append(order, p.Name)
	}
	work, err := os.MkdirTemp("", "cdplane-layers-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(work)

	base, err := baseFS(debs, order, o.Log)
	if err != nil {
		return v1.Hash{}, err
	}
	basePath := filepath.Join(work, "base.tar.gz")
	if err := base.WriteLayer(basePath, o.Epoch); err != nil {
		return v1.Hash{}, err
	}
	binFS := NewFS()
	for _, c := range cmds {
		data, err := os.ReadFile(filepath.Join(binDir, c))
		if err != nil {
			return v1.Hash{}, err
		}
		if err := binFS.File(BinDir+"/"+c, 0o755, data); err != nil {
			return v1.Hash{}, err
		}
	}
	binPath := filepath.Join(work, "bin.tar.gz")
	if err := binFS.WriteLayer(binPath, o.Epoch); err != nil {
		return v1.Hash{}, err
	}
	img, err := newImage(Image{
		Name: o.Name, Tag: o.Tag, Version: o.Version, Commit: o.Commit, Arch: runtime.GOARCH, Created: o.Epoch,
		Layers:        []string{basePath, binPath},
		LayerComments: []string{"base: Debian packages of " + filepath.Base(o.Lock), "cdplane binaries in /" + BinDir},
	})
	if err != nil {
		return v1.Hash{}, err
	}
	if err := os.MkdirAll(filepath.Dir(o.Out), 0o755); err != nil {
		return v1.Hash{}, err
	}
	return WriteArchive(o.Out, img, o.Name, o.Tag)
}

// DefaultCacheDir is where .debs are kept between builds: $CDPLANE_CACHE_DIR/debs, by default
// ${XDG_CACHE_HOME:-$HOME/.cache}/cdplane/debs (the control-plane binaries' cache beside it).
func DefaultCacheDir() (string, error) {
	if d := os.Getenv("CDPLANE_CACHE_DIR"); d != "" {
		return filepath.Join(d, "debs"), nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "cdplane", "debs"), nil
}
