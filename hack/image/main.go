// Command image builds cdplane's container image, for linux/amd64 and linux/arm64 in one
// archive, and its release without a container engine:
//
//	go run ./hack/image image   --out bin/image/cdplane-0.1.0.oci.tar --commit abc  # `make image`
//	go run ./hack/image release --image bin/image/cdplane-0.1.0.oci.tar --out bin/release/0.1.0
//	go run ./hack/image lock    # pin the current Debian versions of the lock's packages, every platform's (--platforms: some)
//
// Times in the image come from SOURCE_DATE_EPOCH (0 when unset); the version from
// internal/version's VERSION file. See package imagebuild.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	charts "cdplane/deployments/helm"
	"cdplane/hack/image/imagebuild"
	"cdplane/internal/version"
)

const lockHeader = `Debian bookworm packages of the image's base layer, pinned: name version arch sha256 of the .deb.
One file for every platform of the image (linux/amd64, linux/arm64): a package of architecture
"all" has one line, used for both; any other has one line per architecture (libc6 amd64, libc6
arm64), and each platform's base layer gets the "all" lines and its own.
The image build downloads each with apt-get download <name>:<arch>=<version> and refuses a .deb
whose SHA256 differs. Regenerate (the current versions of the same packages, for every platform):
go run ./hack/image lock (arm64 needs: dpkg --add-architecture arm64 && apt-get update).
To add a package, add a line for it (any version and sha256) and regenerate.`

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: image image|release|lock [flags]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	lock := fs.String("lock", "hack/image/packages.lock", "lock file of the base layer's Debian packages")
	epoch, err := sourceDateEpoch()
	if err != nil {
		return err
	}
	switch args[0] {
	case "image":
		out := fs.String("out", "", "the image archive to write")
		commit := fs.String("commit", "unknown", "the commit the binaries report")
		repository := fs.String("repository", "docker.io/library/cdplane", "the image's repository; its tag is the version")
		platforms := fs.String("platforms", "linux/"+strings.Join(imagebuild.Arches, ",linux/"), "the image's platforms, comma-separated, in its index's order")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *out == "" {
			return errors.New("--out is required")
		}
		arches, err := parsePlatforms(*platforms)
		if err != nil {
			return err
		}
		cache, err := imagebuild.DefaultCacheDir()
		if err != nil {
			return err
		}
		res, err := imagebuild.Build(imagebuild.Options{
			Repo: ".", Version: version.Version, Commit: *commit, Name: *repository + ":" + version.Version, Tag: version.Version,
			Arches: arches, Epoch: epoch, Lock: *lock, CacheDir: cache, Out: *out, Log: os.Stderr,
		})
		if err != nil {
			return err
		}
		fi, err := os.Stat(*out)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "Wrote %s (%.1f MiB): %s:%s %s, binaries %s\n", *out, float64(fi.Size())/(1<<20),
			*repository, version.Version, res.Digest, strings.Join(res.Binaries, " "))
		for _, p := range res.Platforms {
			fmt.Fprintf(os.Stderr, "  linux/%-6s %s (base layer %.1f MiB, binaries %.1f MiB)\n", p.Arch, p.Digest,
				float64(p.BaseSize)/(1<<20), float64(p.BinSize)/(1<<20))
		}
		fmt.Println(res.Digest)
		return nil
	case "release":
		image := fs.String("image", "", "the image archive (make image)")
		out := fs.String("out", "", "the release directory")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *image == "" || *out == "" {
			return errors.New("--image and --out are required")
		}
		return release(*image, *out, epoch)
	case "lock":
		platforms := fs.String("platforms", "linux/"+strings.Join(imagebuild.Arches, ",linux/"), "the platforms whose packages are pinned again; the others' lines are kept as they are")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		arches, err := parsePlatforms(*platforms)
		if err != nil {
			return err
		}
		return relock(*lock, arches)
	default:
		return fmt.Errorf("unknown command %q: want image, release or lock", args[0])
	}
}

// parsePlatforms reads --platforms: linux/<arch>, comma-separated, each of imagebuild.Arches
// at most once.
func parsePlatforms(s string) ([]string, error) {
	var arches []string
	for _, p := range strings.Split(s, ",") {
		arch, ok := strings.CutPrefix(strings.TrimSpace(p), "linux/")
		if !ok || !slices.Contains(imagebuild.Arches, arch) || slices.Contains(arches, arch) {
			return nil, fmt.Errorf("--platforms %q: want some of linux/%s, comma-separated, each once", s, strings.Join(imagebuild.Arches, ", linux/"))
		}
		arches = append(arches, arch)
	}
	return arches, nil
}

// sourceDateEpoch is SOURCE_DATE_EPOCH, the Unix epoch when unset.
func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q is not a Unix time", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

// release writes the image archive, both packaged charts and their SHA256SUMS into dir. The
// archive must hold every platform: a release never ships an image built for fewer.
func release(image, dir string, epoch time.Time) error {
	platforms, err := imagebuild.ArchivePlatforms(image)
	if err != nil {
		return err
	}
	var want []string
	for _, a := range imagebuild.Arches {
		want = append(want, "linux/"+a)
	}
	if !slices.Equal(platforms, want) {
		return fmt.Errorf("%s holds %s; a release ships %s: build it with make image, without IMAGE_PLATFORMS",
			image, strings.Join(platforms, ", "), strings.Join(want, ", "))
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files := []string{filepath.Base(image)}
	if err := copyFile(image, filepath.Join(dir, files[0])); err != nil {
		return err
	}
	for _, c := range []string{charts.Prerequisites, charts.Plane} {
		p, err := charts.Package(c, dir, epoch)
		if err != nil {
			return err
		}
		files = append(files, filepath.Base(p))
	}
	sort.Strings(files)
	var sums bytes.Buffer
	for _, f := range files {
		sum, err := imagebuild.FileSHA256(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		fmt.Fprintf(&sums, "%s  %s\n", sum, f)
	}
	if err := os.WriteFile(filepath.Join(dir, "SHA256SUMS"), sums.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "Wrote %s (image for %s):\n%s", dir, strings.Join(platforms, ", "), sums.String())
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// relock rewrites the lock with the current candidate version of each of its packages, for
// every platform: a package whose candidate is of architecture "all" gets one line, any other
// one line per architecture of imagebuild.Arches (apt-get download <name>:<arch>), whatever
// architectures the lock listed it for before.
func relock(lock string, arches []string) error {
	data, err := os.ReadFile(lock)
	if err != nil {
		return err
	}
	old, err := imagebuild.ParseLock(data)
	if err != nil {
		return err
	}
	var names []string
	for _, p := range old {
		if !slices.Contains(names, p.Name) {
			names = append(names, p.Name)
		}
	}
	tmp, err := os.MkdirTemp("", "cdplane-lock-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var pkgs []imagebuild.Package
	for _, name := range names {
		// The candidate for the host's architecture says whether the package is "all".
		p, err := download(tmp, name, "")
		if err != nil {
			return err
		}
		if p.Arch == "all" {
			pkgs = append(pkgs, p)
			continue
		}
		for _, arch := range imagebuild.Arches {
			if !slices.Contains(arches, arch) {
				// Not pinned again (a machine without that architecture): its line as it was.
				if i := slices.IndexFunc(old, func(o imagebuild.Package) bool { return o.Name == name && o.Arch == arch }); i >= 0 {
					pkgs = append(pkgs, old[i])
				}
				continue
			}
			if err := imagebuild.CheckDpkgArch(arch); err != nil {
				return fmt.Errorf("pinning %s for %s: %w", name, arch, err)
			}
			p, err := download(tmp, name, arch)
			if err != nil {
				return err
			}
			if p.Arch != arch {
				return fmt.Errorf("apt-get download %s:%s gave a package of architecture %s", name, arch, p.Arch)
			}
			pkgs = append(pkgs, p)
		}
	}
	return os.WriteFile(lock, imagebuild.FormatLock(lockHeader, pkgs), 0o644)
}

// download fetches the candidate of package name (for arch; "" for apt's default) into a new
// directory under tmp and returns it pinned.
func download(tmp, name, arch string) (imagebuild.Package, error) {
	spec := name
	if arch != "" {
		spec += ":" + arch
	}
	dir, err := os.MkdirTemp(tmp, "deb-")
	if err != nil {
		return imagebuild.Package{}, err
	}
	cmd := exec.Command("apt-get", "download", spec)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return imagebuild.Package{}, fmt.Errorf("apt-get download %s: %w\n%s", spec, err, out)
	}
	debs, err := filepath.Glob(filepath.Join(dir, "*.deb"))
	if err != nil || len(debs) != 1 {
		return imagebuild.Package{}, fmt.Errorf("apt-get download %s: want one .deb, got %v", spec, debs)
	}
	fields, err := exec.Command("dpkg-deb", "--showformat=${Package} ${Version} ${Architecture}", "--show", debs[0]).Output()
	if err != nil {
		return imagebuild.Package{}, fmt.Errorf("dpkg-deb --show %s: %w", debs[0], err)
	}
	f := strings.Fields(string(fields))
	if len(f) != 3 {
		return imagebuild.Package{}, fmt.Errorf("dpkg-deb --show %s: %q", debs[0], fields)
	}
	sum, err := imagebuild.FileSHA256(debs[0])
	if err != nil {
		return imagebuild.Package{}, err
	}
	return imagebuild.Package{Name: f[0], Version: f[1], Arch: f[2], SHA256: sum}, nil
}
