// Package image tests cdplane's container image as `make image` builds it (hack/image): the
// archive loads as an OCI layout and as a docker archive, two assemblies give the same digest,
// and every binary starts from the image's root filesystem (chroot, as nonroot) and reports the
// version.
package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"cdplane/hack/image/imagebuild"
	"cdplane/internal/version"
)

const commit = "0123456789ab"

func TestImage(t *testing.T) {
	for _, tool := range []string{"apt-get", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the image's base layer is assembled from Debian packages with apt-get and dpkg-deb; %s is not on PATH", tool)
		}
	}
	repo := repoRoot(t)
	tmp := t.TempDir()
	cache, err := imagebuild.DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	bins := filepath.Join(tmp, "bin")
	var log bytes.Buffer
	cmds, err := imagebuild.BuildBinaries(repo, bins, commit, &log)
	if err != nil {
		t.Fatalf("building the binaries: %v\n%s", err, log.String())
	}
	ref := "docker.io/library/cdplane:" + version.Version
	o := imagebuild.Options{
		Repo: repo, Version: version.Version, Commit: commit, Name: ref, Tag: version.Version,
		Epoch: time.Unix(1700000000, 0), Lock: usableLock(t, repo, cache), CacheDir: cache, Log: &log,
	}
	// Two assemblies from the same inputs, in different places: the same bytes.
	var archives []string
	var digests []v1.Hash
	for i := range 2 {
		o.Out = filepath.Join(tmp, fmt.Sprint(i), "cdplane.oci.tar")
		d, err := imagebuild.Assemble(o, bins, cmds)
		if err != nil {
			t.Fatalf("assembling the image: %v\n%s", err, log.String())
		}
		archives, digests = append(archives, o.Out), append(digests, d)
	}
	if digests[0] != digests[1] || fileSHA(t, archives[0]) != fileSHA(t, archives[1]) {
		t.Errorf("two assemblies from the same inputs differ: digests %s and %s", digests[0], digests[1])
	}

	img := loadOCI(t, archives[0], digests[0], ref)
	checkDockerArchive(t, archives[0], img)
	checkConfig(t, img)
	root := filepath.Join(tmp, "rootfs")
	extract(t, img, root)
	for _, p := range []string{"lib64/ld-linux-x86-64.so.2", "etc/ssl/certs/ca-certificates.crt", "var/lib/dpkg/status.d/libc6"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("the image has no /%s: %v", p, err)
		}
	}
	if pw, err := os.ReadFile(filepath.Join(root, "etc", "passwd")); err != nil || !strings.Contains(string(pw), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user 65532: %q %v", pw, err)
	}

	if os.Geteuid() != 0 {
		t.Skip("running the binaries from the image's root filesystem needs chroot: run as root (as CI does)")
	}
	for _, c := range cmds {
		t.Run(c, func(t *testing.T) {
			cmd := exec.Command("/"+imagebuild.BinDir+"/"+c, "--version")
			cmd.Dir = "/"
			cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
			cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: imagebuild.NonrootUID, Gid: imagebuild.NonrootUID}}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("chroot %s /%s/%s --version: %v\n%s", root, imagebuild.BinDir, c, err, out)
			}
			want := fmt.Sprintf("%s %s (commit %s, go", c, version.Version, commit)
			if !strings.HasPrefix(string(out), want) {
				t.Errorf("%s --version printed %q, want it to start with %q", c, out, want)
			}
		})
	}
}

// loadOCI reads the archive as an OCI image layout and returns its one image, checking the name
// ctr gives it.
func loadOCI(t *testing.T, archive string, digest v1.Hash, ref string) v1.Image {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layout")
	untar(t, archive, dir)
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatalf("the archive is not an OCI image layout: %v", err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Digest != digest || m.Manifests[0].Annotations["io.containerd.image.name"] != ref {
		t.Fatalf("index.json: %+v, want one image %s named %s", m.Manifests, digest, ref)
	}
	img, err := idx.Image(digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// checkDockerArchive reads the archive as `docker load` does (manifest.json) and compares it to
// the OCI image: the same configuration and layers, tagged cdplane:<version>.
func checkDockerArchive(t *testing.T, archive string, oci v1.Image) {
	t.Helper()
	tag, err := name.NewTag("cdplane:" + version.Version)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		t.Fatalf("the archive is not a docker archive with cdplane:%s: %v", version.Version, err)
	}
	want, err := oci.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	got, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("manifest.json's config %s, index.json's %s", got, want)
	}
	wl, _ := oci.Layers()
	gl, err := img.Layers()
	if err != nil || len(gl) != len(wl) {
		t.Fatalf("manifest.json's layers: %d, %v; want %d", len(gl), err, len(wl))
	}
	for i := range gl {
		g, _ := gl[i].DiffID()
		w, _ := wl[i].DiffID()
		if g != w {
			t.Errorf("layer %d: manifest.json's %s, index.json's %s", i, g, w)
		}
	}
}

func checkConfig(t *testing.T, img v1.Image) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"user": "0", "os": "linux", "version": version.Version, "revision": commit,
		"path": "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	}
	got := map[string]string{
		"user": cf.Config.User, "os": cf.OS, "version": cf.Config.Labels["org.opencontainers.image.version"],
		"revision": cf.Config.Labels["org.opencontainers.image.revision"], "path": cf.Config.Env[0],
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("image configuration (-want +got):\n%s", diff)
	}
}

// extract writes the image's flattened filesystem into dir, owners kept when running as root.
func extract(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	if err := untarFrom(rc, dir); err != nil {
		t.Fatalf("extracting the image: %v", err)
	}
}

func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := untarFrom(f, dir); err != nil {
		t.Fatalf("%s: %v", archive, err)
	}
}

func untarFrom(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	root := os.Geteuid() == 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: unexpected type %q", h.Name, h.Typeflag)
		}
		if h.Typeflag != tar.TypeSymlink {
			if err := os.Chmod(p, os.FileMode(h.Mode)&os.ModePerm|modeBits(h.Mode)); err != nil {
				return err
			}
		}
		if root {
			if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
				return err
			}
		}
	}
}

// modeBits are the setuid, setgid and sticky bits of a tar mode.
func modeBits(m int64) os.FileMode {
	var b os.FileMode
	if m&0o4000 != 0 {
		b |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		b |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		b |= os.ModeSticky
	}
	return b
}

func fileSHA(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(data))
}

// usableLock returns the checked-in lock of the base layer's Debian packages when every pinned
// .deb can be had (cached or from the archive). Debian's archive keeps only the current version
// of a package: once a pinned one is superseded, `make image` says to re-pin, and this test
// goes on with a lock of the current versions (written by `hack/image lock` into a copy), so
// that what it checks (reproducible assembly, the binaries running from the image) does not
// depend on the day it runs.
func usableLock(t *testing.T, repo, cache string) string {
	t.Helper()
	lock := filepath.Join(repo, "hack", "image", "packages.lock")
	data, err := os.ReadFile(lock)
	if err != nil {
		t.Fatal(err)
	}
	pkgs, err := imagebuild.ParseLock(data)
	if err != nil {
		t.Fatal(err)
	}
	var fetchLog bytes.Buffer
	var missing error
	for _, p := range pkgs {
		if _, err := imagebuild.Fetch(p, cache, &fetchLog); err != nil {
			missing = err
			break
		}
	}
	if missing == nil {
		return lock
	}
	t.Logf("a pinned package cannot be had (%v); re-pin with `go run ./hack/image lock`. Going on with the current versions.", missing)
	fresh := filepath.Join(t.TempDir(), "packages.lock")
	if err := os.WriteFile(fresh, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "./hack/image", "lock", "-lock", fresh)
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pinning the current versions: %v\n%s", err, out)
	}
	return fresh
}
