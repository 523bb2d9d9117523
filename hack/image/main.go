// Command image builds cdplane's container image and its release without a container engine:
//
//	go run ./hack/image image   --out bin/image/cdplane-0.1.0.oci.tar --commit abc  # `make image`
//	go run ./hack/image release --image bin/image/cdplane-0.1.0.oci.tar --out bin/release/0.1.0
//	go run ./hack/image lock    # pin the current Debian versions of the lock's packages
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
	"sort"
	"strconv"
	"strings"
	"time"

	charts "cdplane/deployments/helm"
	"cdplane/hack/image/imagebuild"
	"cdplane/internal/version"
)

const lockHeader = `Debian packages of the image's base layer, pinned: name version arch sha256 of the .deb.
The image build downloads each with apt-get download and refuses a .deb whose SHA256 differs.
Regenerate (the current versions of the same packages): go run ./hack/image lock`

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
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *out == "" {
			return errors.New("--out is required")
		}
		cache, err := imagebuild.DefaultCacheDir()
		if err != nil {
			return err
		}
		res, err := imagebuild.Build(imagebuild.Options{
			Repo: ".", Version: version.Version, Commit: *commit, Name: *repository + ":" + version.Version, Tag: version.Version,
			Epoch: epoch, Lock: *lock, CacheDir: cache, Out: *out, Log: os.Stderr,
		})
		if err != nil {
			return err
		}
		fi, err := os.Stat(*out)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "Wrote %s (%.1f MiB): %s:%s, binaries %s\n", *out, float64(fi.Size())/(1<<20),
			*repository, version.Version, strings.Join(res.Binaries, " "))
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
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return relock(*lock)
	default:
		return fmt.Errorf("unknown command %q: want image, release or lock", args[0])
	}
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

// release writes the image archive, both packaged charts and their SHA256SUMS into dir.
func release(image, dir string, epoch time.Time) error {
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
	fmt.Fprintf(os.Stderr, "Wrote %s:\n%s", dir, sums.String())
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

// relock rewrites the lock with the current candidate version of each of its packages.
func relock(lock string) error {
	data, err := os.ReadFile(lock)
	if err != nil {
		return err
	}
	old, err := imagebuild.ParseLock(data)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "cdplane-lock-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var pkgs []imagebuild.Package
	for _, p := range old {
		dir := filepath.Join(tmp, p.Name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
		cmd := exec.Command("apt-get", "download", p.Name)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get download %s: %w\n%s", p.Name, err, out)
		}
		debs, err := filepath.Glob(filepath.Join(dir, "*.deb"))
		if err != nil || len(debs) != 1 {
			return fmt.Errorf("apt-get download %s: want one .deb, got %v", p.Name, debs)
		}
		fields, err := exec.Command("dpkg-deb", "--showformat=${Package} ${Version} ${Architecture}", "--show", debs[0]).Output()
		if err != nil {
			return fmt.Errorf("dpkg-deb --show %s: %w", debs[0], err)
		}
		f := strings.Fields(string(fields))
		sum, err := imagebuild.FileSHA256(debs[0])
		if err != nil {
			return err
		}
		pkgs = append(pkgs, imagebuild.Package{Name: f[0], Version: f[1], Arch: f[2], SHA256: sum})
	}
	return os.WriteFile(lock, imagebuild.FormatLock(lockHeader, pkgs), 0o644)
}
