// Package image tests cdplane's container image as `make image` builds it (hack/image): the
// archive loads as an OCI layout, an index of a linux/amd64 and a linux/arm64 image, and as a
// docker archive; two assemblies give the same digest; each platform's layers hold the C and C++
// runtime of its architecture and binaries built for it; and every binary starts from the
// image's root filesystem and reports the version: the host's platform under chroot (as
// nonroot), the other under qemu-user where it is installed.
package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"cdplane/hack/image/imagebuild"
	"cdplane/internal/version"
)

const commit = "0123456789ab"

// elfMachine is the ELF machine of each platform's binaries.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// qemuArch is qemu-user's name of each architecture (qemu-<name>, qemu-<name>-static).
var qemuArch = map[string]string{"amd64": "x86_64", "arm64": "aarch64"}

func TestImage(t *testing.T) {
	for _, tool := range []string{"apt-get", "dpkg-deb", "dpkg"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the image's base layer is assembled from Debian packages with apt-get and dpkg-deb; %s is not on PATH", tool)
		}
	}
	// The image holds every platform; building one here needs its Debian architecture and
	// cross compiler, as `make image` does (docs/installing.md, "Building the image"). The
	// platforms this machine cannot build are left out and named (a fresh CI machine builds the
	// host's alone); the test fails only when it can build none.
	var arches []string
	for _, arch := range imagebuild.Arches {
		if err := imagebuild.CheckDpkgArch(arch); err != nil {
			t.Logf("NOT CHECKED: the image's linux/%s: %v", arch, err)
			continue
		}
		if _, err := imagebuild.CrossCompiler(arch); err != nil {
			t.Logf("NOT CHECKED: the image's linux/%s: %v", arch, err)
			continue
		}
		arches = append(arches, arch)
	}
	if len(arches) == 0 {
		t.Fatal("this machine can build the image for no platform")
	}
	repo := repoRoot(t)
	tmp := t.TempDir()
	cache, err := imagebuild.DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	binDirs := map[string]string{}
	var cmds []string
	for _, arch := range arches {
		binDirs[arch] = filepath.Join(tmp, "bin", arch)
		if cmds, err = imagebuild.BuildBinaries(repo, binDirs[arch], commit, arch, &log); err != nil {
			t.Fatalf("building the binaries for linux/%s: %v\n%s", arch, err, log.String())
		}
	}
	ref := "docker.io/library/cdplane:" + version.Version
	o := imagebuild.Options{
		Repo: repo, Version: version.Version, Commit: commit, Name: ref, Tag: version.Version,
		Epoch: time.Unix(1700000000, 0), Lock: usableLock(t, repo, cache, arches), CacheDir: cache, Log: &log,
		Arches: arches,
	}
	// Two assemblies from the same inputs, in different places: the same bytes.
	var archives []string
	var results []imagebuild.Result
	for i := range 2 {
		o.Out = filepath.Join(tmp, fmt.Sprint(i), "cdplane.oci.tar")
		res, err := imagebuild.Assemble(o, binDirs, cmds)
		if err != nil {
			t.Fatalf("assembling the image: %v\n%s", err, log.String())
		}
		archives, results = append(archives, o.Out), append(results, res)
	}
	if diff := cmp.Diff(results[0], results[1]); diff != "" || fileSHA(t, archives[0]) != fileSHA(t, archives[1]) {
		t.Errorf("two assemblies from the same inputs differ (-first +second):\n%s", diff)
	}

	imgs := loadOCI(t, archives[0], results[0], ref)
	checkDockerArchive(t, archives[0], imgs[arches[0]])
	for _, arch := range arches {
		t.Run("linux/"+arch, func(t *testing.T) {
			img := imgs[arch]
			checkConfig(t, img, arch)
			layers, err := img.Layers()
			if err != nil || len(layers) != 2 {
				t.Fatalf("layers: %d, %v; want the base layer and the binaries", len(layers), err)
			}
			checkBaseLayer(t, readLayer(t, layers[0]), arch)
			interp := checkBinaries(t, readLayer(t, layers[1]), cmds, arch)
			root := filepath.Join(tmp, "rootfs-"+arch)
			extract(t, img, root)
			if interp == "" {
				t.Fatal("no binary is linked dynamically: the cgo binaries (go-nvml) should be")
			}
			if _, err := os.Lstat(filepath.Join(root, interp)); err != nil {
				t.Errorf("the cgo binaries' loader %s is not in the image: %v", interp, err)
			}
			if pw, err := os.ReadFile(filepath.Join(root, "etc", "passwd")); err != nil || !strings.Contains(string(pw), "nonroot:x:65532:65532:") {
				t.Errorf("/etc/passwd has no nonroot user 65532: %q %v", pw, err)
			}
			run := runner(t, root, arch)
			if run == nil {
				return
			}
			// The loader of the image finds the C++ runtime's dependencies in the image, as it
			// will for the host driver's nvidia-imex.
			triplet, _ := imagebuild.Triplet(arch)
			out, err := run(interp, "--list", "/usr/lib/"+triplet+"/libstdc++.so.6")
			if err != nil || !strings.Contains(out, "libgcc_s.so.1 => /") || strings.Contains(out, "not found") {
				t.Errorf("%s --list libstdc++.so.6: %v\n%s", interp, err, out)
			} else {
				t.Logf("%s --list /usr/lib/%s/libstdc++.so.6:\n%s", interp, triplet, out)
			}
			for _, c := range cmds {
				t.Run(c, func(t *testing.T) {
					out, err := run("/"+imagebuild.BinDir+"/"+c, "--version")
					if err != nil {
						t.Fatalf("%s --version: %v\n%s", c, err, out)
					}
					want := fmt.Sprintf("%s %s (commit %s, go", c, version.Version, commit)
					if !strings.HasPrefix(out, want) {
						t.Errorf("%s --version printed %q, want it to start with %q", c, out, want)
					}
					t.Logf("linux/%s: %s", arch, strings.TrimSpace(out))
				})
			}
		})
	}
}

// runner returns how to run a program of the image's root filesystem root, for arch: under
// chroot as nonroot for the host's architecture (as root only), under qemu-user with root as
// its prefix (-L: the loader and libraries come from the image) for another. Nil, the test
// skipped, when neither can be.
func runner(t *testing.T, root, arch string) func(prog string, args ...string) (string, error) {
	t.Helper()
	if arch == runtime.GOARCH {
		if os.Geteuid() != 0 {
			t.Skip("running the binaries from the image's root filesystem needs chroot: run as root (as CI does)")
			return nil
		}
		return func(prog string, args ...string) (string, error) {
			cmd := exec.Command(prog, args...)
			cmd.Dir = "/"
			cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
			cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: imagebuild.NonrootUID, Gid: imagebuild.NonrootUID}}
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
	}
	var qemu string
	for _, q := range []string{"qemu-" + qemuArch[arch], "qemu-" + qemuArch[arch] + "-static"} {
		if p, err := exec.LookPath(q); err == nil {
			qemu = p
			break
		}
	}
	if qemu == "" {
		t.Skipf("running the linux/%s binaries on this %s host needs qemu-user (qemu-%s on PATH: apt-get install qemu-user); the layers were checked, the binaries not run",
			arch, runtime.GOARCH, qemuArch[arch])
		return nil
	}
	t.Logf("running linux/%s programs with %s -L %s", arch, qemu, root)
	return func(prog string, args ...string) (string, error) {
		cmd := exec.Command(qemu, append([]string{"-L", root, filepath.Join(root, prog)}, args...)...)
		cmd.Dir = root
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
}

// entry is one entry of a layer.
type entry struct {
	typ  byte
	link string
	data []byte
}

// readLayer reads a layer's entries by name (no leading "/" or "./", no trailing "/").
func readLayer(t *testing.T, l v1.Layer) map[string]entry {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	entries := map[string]entry{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return entries
		}
		if err != nil {
			t.Fatal(err)
		}
		e := entry{typ: h.Typeflag, link: h.Linkname}
		if h.Typeflag == tar.TypeReg {
			if e.data, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
		entries[strings.Trim(path.Clean("/"+h.Name), "/")] = e
	}
}

// checkBaseLayer checks that the base layer holds arch's C library and loader, its C++ runtime
// (libstdc++.so.6 and libgcc_s.so.1, in one of the loader's directories for arch's triplet:
// bookworm's libgcc-s1 puts it in /lib/<triplet>, libstdc++6 in /usr/lib/<triplet>), the
// packages' control files and the CA bundle.
func checkBaseLayer(t *testing.T, base map[string]entry, arch string) {
	t.Helper()
	triplet, err := imagebuild.Triplet(arch)
	if err != nil {
		t.Fatal(err)
	}
	for _, lib := range []string{"libc.so.6", "libstdc++.so.6", "libgcc_s.so.1"} {
		var found []string
		for _, dir := range []string{"lib/" + triplet, "usr/lib/" + triplet} {
			if p := resolve(base, dir+"/"+lib); p != "" {
				found = append(found, "/"+dir+"/"+lib+" ("+elfMachineOf(base[p].data)+")")
				if m := elfMachineOf(base[p].data); m != elfMachine[arch].String() {
					t.Errorf("/%s is %s, want %s", p, m, elfMachine[arch])
				}
			}
		}
		if len(found) == 0 {
			t.Errorf("the linux/%s base layer has no %s in /lib/%s or /usr/lib/%s", arch, lib, triplet, triplet)
		}
		t.Logf("linux/%s base layer: %s", arch, strings.Join(found, ", "))
	}
	for _, p := range []string{
		"etc/ssl/certs/ca-certificates.crt", "usr/share/doc/gcc-12-base/copyright",
		"var/lib/dpkg/status.d/libc6", "var/lib/dpkg/status.d/libgcc-s1", "var/lib/dpkg/status.d/libstdc++6",
	} {
		if resolve(base, p) == "" {
			t.Errorf("the linux/%s base layer has no /%s", arch, p)
		}
	}
	if s := string(base["var/lib/dpkg/status.d/libc6"].data); !strings.Contains(s, "Architecture: "+arch+"\n") {
		t.Errorf("the linux/%s base layer's libc6 is not for %s:\n%s", arch, arch, s)
	}
}

// resolve follows symbolic links within a layer from name to a regular file; "" when there is
// none.
func resolve(layer map[string]entry, name string) string {
	for range 10 {
		e, ok := layer[name]
		switch {
		case !ok:
			return ""
		case e.typ == tar.TypeReg:
			return name
		case e.typ != tar.TypeSymlink:
			return ""
		case strings.HasPrefix(e.link, "/"):
			name = strings.TrimPrefix(path.Clean(e.link), "/")
		default:
			name = strings.TrimPrefix(path.Join("/", path.Dir(name), e.link), "/")
		}
	}
	return ""
}

// elfMachineOf is the ELF machine of an executable or library, or why there is none.
func elfMachineOf(data []byte) string {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return "not ELF: " + err.Error()
	}
	return f.Machine.String()
}

// checkBinaries checks that the binaries' layer holds exactly the commands, each an ELF
// executable for arch, and returns the loader (PT_INTERP) the dynamically linked ones name.
func checkBinaries(t *testing.T, bins map[string]entry, cmds []string, arch string) string {
	t.Helper()
	var got []string
	for n, e := range bins {
		if e.typ == tar.TypeReg {
			got = append(got, strings.TrimPrefix(n, imagebuild.BinDir+"/"))
		}
	}
	if diff := cmp.Diff(cmds, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("the binaries' layer (-want +got):\n%s", diff)
	}
	var interp string
	for _, c := range cmds {
		f, err := elf.NewFile(bytes.NewReader(bins[imagebuild.BinDir+"/"+c].data))
		if err != nil {
			t.Errorf("/%s/%s: %v", imagebuild.BinDir, c, err)
			continue
		}
		if f.Machine != elfMachine[arch] || f.Class != elf.ELFCLASS64 {
			t.Errorf("/%s/%s is %s %s, want %s for linux/%s", imagebuild.BinDir, c, f.Class, f.Machine, elfMachine[arch], arch)
		}
		for _, p := range f.Progs {
			if p.Type != elf.PT_INTERP {
				continue
			}
			b, err := io.ReadAll(p.Open())
			if err != nil {
				t.Fatal(err)
			}
			i := strings.TrimRight(string(b), "\x00")
			if interp != "" && i != interp {
				t.Errorf("/%s/%s's loader is %s, another's %s", imagebuild.BinDir, c, i, interp)
			}
			interp = i
		}
	}
	return interp
}

// loadOCI reads the archive as an OCI image layout: its index.json names one image, the
// image's digest, an index with one manifest per platform, in imagebuild.Arches' order, each
// with its platform and digest as the build reported. It returns each platform's image.
func loadOCI(t *testing.T, archive string, res imagebuild.Result, ref string) map[string]v1.Image {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layout")
	untar(t, archive, dir)
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatalf("the archive is not an OCI image layout: %v", err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].Digest != res.Digest || tm.Manifests[0].MediaType != types.OCIImageIndex ||
		tm.Manifests[0].Annotations["io.containerd.image.name"] != ref {
		t.Fatalf("index.json: %+v, want one image index %s named %s", tm.Manifests, res.Digest, ref)
	}
	idx, err := top.ImageIndex(res.Digest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	imgs := map[string]v1.Image{}
	for _, d := range m.Manifests {
		if d.Platform == nil {
			t.Fatalf("the image index's manifest %s has no platform", d.Digest)
		}
		got = append(got, d.Platform.String()+" "+d.Digest.String())
		if imgs[d.Platform.Architecture], err = idx.Image(d.Digest); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range res.Platforms {
		want = append(want, "linux/"+p.Arch+" "+p.Digest.String())
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("the image index's manifests (-want +got):\n%s", diff)
	}
	t.Logf("index.json: %s %s:\n  %s", ref, res.Digest, strings.Join(got, "\n  "))
	return imgs
}

// checkDockerArchive reads the archive as `docker load` does (manifest.json) and compares it to
// the OCI image of the first platform: the same configuration and layers, tagged
// cdplane:<version>.
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

func checkConfig(t *testing.T, img v1.Image, arch string) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"user": "0", "os": "linux", "architecture": arch, "version": version.Version, "revision": commit,
		"path": "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	}
	got := map[string]string{
		"user": cf.Config.User, "os": cf.OS, "architecture": cf.Architecture, "version": cf.Config.Labels["org.opencontainers.image.version"],
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

// usableLock returns the checked-in lock of the base layer's Debian packages (every platform's)
// when every pinned .deb can be had (cached or from the archive). Debian's archive keeps only the current version
// of a package: once a pinned one is superseded, `make image` says to re-pin, and this test
// goes on with a lock of the current versions (written by `hack/image lock` into a copy), so
// that what it checks (reproducible assembly, the binaries running from the image) does not
// depend on the day it runs.
//
// Only the packages of the platforms built here are fetched, and pinned again: a machine
// without arm64 packages builds the amd64 image from the lock's amd64 lines.
func usableLock(t *testing.T, repo, cache string, arches []string) string {
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
		if p.Arch != "all" && !slices.Contains(arches, p.Arch) {
			continue
		}
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
	cmd := exec.Command("go", "run", "./hack/image", "lock", "-lock", fresh, "-platforms", "linux/"+strings.Join(arches, ",linux/"))
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pinning the current versions: %v\n%s", err, out)
	}
	return fresh
}
