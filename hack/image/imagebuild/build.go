// Package imagebuild assembles cdplane's container image without a container engine or a
// registry, as distroless images are made, for linux/amd64 and linux/arm64: per platform, a
// base layer from pinned Debian packages of its architecture (the C library the cgo binaries
// need, the C++ runtime the host driver's nvidia-imex needs, CA certificates, users and groups)
// and a layer of the binaries that `go build` makes for it (cgo cross-compiled with Debian's
// cross compiler), all written as one archive, an index of both images, that ctr, kind and
// docker load. The same inputs (sources, lock file, Go toolchain, cross compiler,
// SOURCE_DATE_EPOCH) give the same image digest.
//
// It is a build tool (hack/image), not part of the product.
package imagebuild

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// BinDir is where the binaries lie in the image (on PATH).
const BinDir = "usr/local/bin"

// Arches are the image's platforms, linux/<arch>, in the order of its index: x86 servers, and
// NVIDIA Grace (Arm) trays. The first one is also the image docker's manifest.json names.
var Arches = []string{"amd64", "arm64"}

// Options are one image build.
type Options struct {
	// Repo is the repository root.
	Repo string
	// Version and Commit label the image and the binaries; Name is the image's reference, e.g.
	// "docker.io/library/cdplane:0.1.0", and Tag its tag.
	Version, Commit, Name, Tag string
	// Arches are the platforms (linux/<arch>) to build, in the index's order; nil: Arches.
	Arches []string
	// Epoch is every time in the image (SOURCE_DATE_EPOCH).
	Epoch time.Time
	// Lock is the lock file of the base packages (every platform's); CacheDir keeps the
	// downloaded .debs.
	Lock, CacheDir string
	// Out is the archive to write.
	Out string
	// Log receives progress.
	Log io.Writer
}

func (o Options) arches() []string {
	if len(o.Arches) == 0 {
		return Arches
	}
	return o.Arches
}

// Platform is one image of the archive's index.
type Platform struct {
	// Arch is its architecture (linux/<Arch>).
	Arch string
	// Digest is its manifest's digest.
	Digest v1.Hash
	// BaseSize and BinSize are its two layers' compressed sizes.
	BaseSize, BinSize int64
}

// Result is what a build made.
type Result struct {
	// Digest is the image's digest: that of the index of its platforms, which the archive's
	// index.json names.
	Digest v1.Hash
	// Platforms are the index's images, in its order.
	Platforms []Platform
	// Binaries are the commands in the image, in BinDir.
	Binaries []string
}

// Build builds the binaries for every platform and the image archive.
func Build(o Options) (Result, error) {
	work, err := os.MkdirTemp("", "cdplane-image-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(work)
	// Every platform's packages and cross compiler first: a missing one fails in seconds, not
	// after minutes of compiling.
	if _, err := basePackages(o); err != nil {
		return Result{}, err
	}
	for _, arch := range o.arches() {
		if _, err := CrossCompiler(arch); err != nil {
			return Result{}, err
		}
	}
	binDirs := map[string]string{}
	var cmds []string
	for _, arch := range o.arches() {
		binDirs[arch] = filepath.Join(work, "bin", arch)
		if cmds, err = BuildBinaries(o.Repo, binDirs[arch], o.Commit, arch, o.Log); err != nil {
			return Result{}, err
		}
	}
	res, err := Assemble(o, binDirs, cmds)
	res.Binaries = cmds
	return res, err
}

// basePackages reads the lock and returns each platform's packages, each .deb fetched: arch ->
// package name -> path of the .deb, and the names in the lock's order.
func basePackages(o Options) (map[string]debSet, error) {
	lock, err := os.ReadFile(o.Lock)
	if err != nil {
		return nil, err
	}
	pkgs, err := ParseLock(lock)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Lock, err)
	}
	sets := map[string]debSet{}
	for _, arch := range o.arches() {
		if _, err := Triplet(arch); err != nil {
			return nil, err
		}
		ps, err := ForArch(pkgs, arch)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.Lock, err)
		}
		set := debSet{paths: map[string]string{}}
		for _, p := range ps {
			if set.paths[p.Name], err = Fetch(p, o.CacheDir, o.Log); err != nil {
				return nil, err
			}
			set.order = append(set.order, p.Name)
		}
		sets[arch] = set
	}
	return sets, nil
}

// debSet is one platform's base packages: the .deb of each name, and the names in order.
type debSet struct {
	paths map[string]string
	order []string
}

// Assemble writes the image archive from the binaries cmds, those for linux/<arch> in
// binDirs[arch]: one image per platform (its base layer from the lock's packages for its
// architecture, its binaries' layer), and an index of them.
func Assemble(o Options, binDirs map[string]string, cmds []string) (Result, error) {
	sets, err := basePackages(o)
	if err != nil {
		return Result{}, err
	}
	work, err := os.MkdirTemp("", "cdplane-layers-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(work)

	var res Result
	var imgs []v1.Image
	for _, arch := range o.arches() {
		fmt.Fprintf(o.Log, "linux/%s:\n", arch)
		base, err := baseFS(sets[arch].paths, sets[arch].order, o.Log)
		if err != nil {
			return Result{}, err
		}
		basePath := filepath.Join(work, arch+"-base.tar.gz")
		if err := base.WriteLayer(basePath, o.Epoch); err != nil {
			return Result{}, err
		}
		binFS := NewFS()
		for _, c := range cmds {
			data, err := os.ReadFile(filepath.Join(binDirs[arch], c))
			if err != nil {
				return Result{}, err
			}
			if err := binFS.File(BinDir+"/"+c, 0o755, data); err != nil {
				return Result{}, err
			}
		}
		binPath := filepath.Join(work, arch+"-bin.tar.gz")
		if err := binFS.WriteLayer(binPath, o.Epoch); err != nil {
			return Result{}, err
		}
		img, err := newImage(Image{
			Name: o.Name, Tag: o.Tag, Version: o.Version, Commit: o.Commit, Arch: arch, Created: o.Epoch,
			Layers: []string{basePath, binPath},
			LayerComments: []string{
				"base: Debian packages of " + filepath.Base(o.Lock) + " for " + arch,
				"cdplane binaries for linux/" + arch + " in /" + BinDir,
			},
		})
		if err != nil {
			return Result{}, err
		}
		p := Platform{Arch: arch}
		if p.Digest, err = img.Digest(); err != nil {
			return Result{}, err
		}
		layers, err := img.Layers()
		if err != nil {
			return Result{}, err
		}
		if p.BaseSize, err = layers[0].Size(); err != nil {
			return Result{}, err
		}
		if p.BinSize, err = layers[1].Size(); err != nil {
			return Result{}, err
		}
		imgs = append(imgs, img)
		res.Platforms = append(res.Platforms, p)
	}
	idx, err := newIndex(imgs)
	if err != nil {
		return Result{}, err
	}
	if err := os.MkdirAll(filepath.Dir(o.Out), 0o755); err != nil {
		return Result{}, err
	}
	res.Digest, err = WriteArchive(o.Out, idx, o.Name, o.Tag)
	return res, err
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
