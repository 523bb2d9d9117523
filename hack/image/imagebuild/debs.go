package imagebuild

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Package is one pinned Debian package of the base layer: a line "name version arch sha256" of
// the lock file.
type Package struct {
	Name, Version, Arch, SHA256 string
}

// FileName is the package's file name as apt-get download writes it (an epoch's colon as %3a).
func (p Package) FileName() string {
	return fmt.Sprintf("%s_%s_%s.deb", p.Name, strings.ReplaceAll(p.Version, ":", "%3a"), p.Arch)
}

// ParseLock reads a lock file: one package a line, '#' starts a comment. A package of
// architecture "all" has one line, for every platform; any other has one line per architecture
// (libc6 amd64, libc6 arm64), never also an "all" one.
func ParseLock(data []byte) ([]Package, error) {
	var pkgs []Package
	seen := map[string]bool{}
	archOf := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 {
			return nil, fmt.Errorf("line %d: want \"name version arch sha256\", got %q", n, line)
		}
		p := Package{Name: f[0], Version: f[1], Arch: f[2], SHA256: strings.ToLower(f[3])}
		if b, err := hex.DecodeString(p.SHA256); err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("line %d: %q is not a SHA256", n, f[3])
		}
		if strings.ContainsAny(p.Name+p.Version+p.Arch, "/=") {
			return nil, fmt.Errorf("line %d: invalid package %q", n, line)
		}
		if seen[p.Name+" "+p.Arch] {
			return nil, fmt.Errorf("line %d: package %s listed twice for %s", n, p.Name, p.Arch)
		}
		if a, ok := archOf[p.Name]; ok && (a == "all") != (p.Arch == "all") {
			if a == "all" {
				a = p.Arch
			}
			return nil, fmt.Errorf("line %d: package %s is listed both for all architectures and for %s", n, p.Name, a)
		}
		seen[p.Name+" "+p.Arch], archOf[p.Name] = true, p.Arch
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		return nil, errors.New("no packages")
	}
	return pkgs, sc.Err()
}

// ForArch returns the packages of the base layer for arch, in the lock's order: those for
// every architecture ("all") and those for arch. It fails when a package the lock has for
// another architecture has no line for arch: every platform gets the same packages.
func ForArch(pkgs []Package, arch string) ([]Package, error) {
	var out []Package
	has := map[string]bool{}
	for _, p := range pkgs {
		if p.Arch == "all" || p.Arch == arch {
			out = append(out, p)
			has[p.Name] = true
		}
	}
	for _, p := range pkgs {
		if !has[p.Name] {
			return nil, fmt.Errorf("package %s is pinned for %s but not for %s (`go run ./hack/image lock` pins it for every platform)", p.Name, p.Arch, arch)
		}
	}
	return out, nil
}

// FormatLock writes a lock file for pkgs under a header comment.
func FormatLock(header string, pkgs []Package) []byte {
	var b bytes.Buffer
	for _, l := range strings.Split(strings.TrimRight(header, "\n"), "\n") {
		b.WriteString(strings.TrimRight("# "+l, " ") + "\n")
	}
	for _, p := range pkgs {
		fmt.Fprintf(&b, "%s %s %s %s\n", p.Name, p.Version, p.Arch, p.SHA256)
	}
	return b.Bytes()
}

// Fetch returns the path of p's .deb in cacheDir, downloading it with `apt-get download` when
// it is not there, and checks its SHA256 against the lock. A stale apt index is updated once
// (apt-get update) before giving up.
func Fetch(p Package, cacheDir string, log io.Writer) (string, error) {
	path := filepath.Join(cacheDir, p.FileName())
	if err := checkSHA256(path, p.SHA256); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(cacheDir, "download-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if p.Arch != "all" {
		if err := CheckDpkgArch(p.Arch); err != nil {
			return "", fmt.Errorf("downloading %s: %w", p.Name, err)
		}
	}
	fmt.Fprintf(log, "Downloading %s=%s (%s)\n", p.Name, p.Version, p.Arch)
	if out, err := aptDownload(tmp, p); err != nil {
		if out2, err2 := exec.Command("apt-get", "update").CombinedOutput(); err2 != nil {
			return "", fmt.Errorf("apt-get download %s=%s: %w\n%s\napt-get update: %w\n%s", p.Name, p.Version, err, out, err2, out2)
		}
		if out, err := aptDownload(tmp, p); err != nil {
			return "", fmt.Errorf("apt-get download %s=%s: %w (is the version still in the archive? `go run ./hack/image lock` pins the current ones)\n%s", p.Name, p.Version, err, out)
		}
	}
	got := filepath.Join(tmp, p.FileName())
	if err := checkSHA256(got, p.SHA256); err != nil {
		return "", fmt.Errorf("%s: %w", p.FileName(), err)
	}
	return path, os.Rename(got, path)
}

func aptDownload(dir string, p Package) ([]byte, error) {
	name := p.Name
	if p.Arch != "all" {
		name += ":" + p.Arch
	}
	cmd := exec.Command("apt-get", "download", name+"="+p.Version)
	cmd.Dir = dir
	return cmd.CombinedOutput()
}

// CheckDpkgArch fails unless apt can download packages of the Debian architecture arch: the
// host's own (dpkg --print-architecture) or one added with dpkg --add-architecture.
func CheckDpkgArch(arch string) error {
	native, err := exec.Command("dpkg", "--print-architecture").Output()
	if err != nil {
		return fmt.Errorf("dpkg --print-architecture: %w", err)
	}
	if strings.TrimSpace(string(native)) == arch {
		return nil
	}
	foreign, err := exec.Command("dpkg", "--print-foreign-architectures").Output()
	if err != nil {
		return fmt.Errorf("dpkg --print-foreign-architectures: %w", err)
	}
	for _, a := range strings.Fields(string(foreign)) {
		if a == arch {
			return nil
		}
	}
	return fmt.Errorf("apt cannot download %s packages here: run `dpkg --add-architecture %s && apt-get update` (as root) once", arch, arch)
}

// checkSHA256 fails unless the file at path has SHA256 want.
func checkSHA256(path, want string) error {
	got, err := FileSHA256(path)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("SHA256 %s, want %s (the lock's)", got, want)
	}
	return nil
}

// FileSHA256 is the hex SHA256 of a file's content.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// debFiles reads the files of a .deb (`dpkg-deb --fsys-tarfile`, the data archive that
// `dpkg-deb -x` extracts) into fs, keeping each entry's type, mode, owner and link target.
func debFiles(deb string, fs *FS) error {
	cmd := exec.Command("dpkg-deb", "--fsys-tarfile", deb)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("dpkg-deb: %w", err)
	}
	rerr := fs.AddTar(out, filepath.Base(deb))
	io.Copy(io.Discard, out) //nolint:errcheck // drain so dpkg-deb can exit
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w: %s", deb, err, stderr.String())
	}
	return rerr
}

// debControl returns the control file of a .deb (`dpkg-deb --field`), for the image's
// /var/lib/dpkg/status.d, where scanners read what a distroless-style image holds.
func debControl(deb string) ([]byte, error) {
	out, err := exec.Command("dpkg-deb", "--field", deb).Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-deb --field %s: %w", deb, err)
	}
	return out, nil
}

// AddTar adds every entry of a tar stream to fs; source names the stream in errors.
func (fs *FS) AddTar(r io.Reader, source string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", source, err)
		}
		name := clean(h.Name)
		if name == "" {
			continue
		}
		e := &Entry{Name: name, Mode: h.FileInfo().Mode().Perm() | h.FileInfo().Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky), UID: h.Uid, GID: h.Gid}
		switch h.Typeflag {
		case tar.TypeDir:
			e.Type = tar.TypeDir
		case tar.TypeReg:
			e.Type = tar.TypeReg
			if e.Data, err = io.ReadAll(tr); err != nil {
				return fmt.Errorf("%s: %s: %w", source, name, err)
			}
		case tar.TypeSymlink:
			e.Type, e.Link = tar.TypeSymlink, h.Linkname
		case tar.TypeLink:
			// A hard link becomes a copy: the layer's sorted order may put it before its target.
			t := fs.Get(h.Linkname)
			if t == nil || t.Type != tar.TypeReg {
				return fmt.Errorf("%s: hard link %s to %s, not a file before it", source, name, h.Linkname)
			}
			e.Type, e.Data = tar.TypeReg, t.Data
		default:
			return fmt.Errorf("%s: %s: unsupported entry type %q", source, name, h.Typeflag)
		}
		if err := fs.Add(e); err != nil {
			return fmt.Errorf("%s: %w", source, err)
		}
	}
}
