// Package driverroot finds the NVIDIA driver's files under a driver root: the host's "/" where
// the driver is installed on the host, or a driver container's root (the GPU operator's
// /run/nvidia/driver) mounted somewhere in the reader's own filesystem. Every link is followed
// inside the root, as if it were "/": a driver container's absolute links must never lead to
// the reader's own "/". Libraries are found through the root's loader cache first, then in the
// directories a driver install uses; a miss names every place tried.
package driverroot

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
)

// LibTriplet is the multiarch directory name of this process's architecture: a plugin loads and
// hands out libraries of its own node's architecture only.
func LibTriplet() string {
	if runtime.GOARCH == "arm64" {
		return "aarch64-linux-gnu"
	}
	return "x86_64-linux-gnu"
}

// Directories of a driver root searched, in order: for binaries, those a driver install (the
// .run installer, the distributions' packages, the GPU operator's driver container) uses; for
// libraries, the same, after the root's own loader cache (etc/ld.so.cache), which knows where
// the root's administrator put them.
var (
	BinDirs = []string{"usr/bin", "usr/sbin", "bin", "sbin", "opt/bin"}
	LibDirs = []string{"usr/lib64", "usr/lib/" + LibTriplet(), "lib64", "lib/" + LibTriplet(), "usr/lib"}
)

// Root is a driver root as a container runtime sees it on the host (Host, the host paths of
// what is handed to containers start with it) and as this process reads it (Container); they
// differ when the reader runs in a pod that mounts the host's driver root elsewhere.
type Root struct{ Host, Container string }

// ldCachePath is the loader cache of a root, relative to it.
const ldCachePath = "etc/ld.so.cache"

// maxSymlinks bounds the links followed resolving one path, as the kernel's ELOOP limit does.
const maxSymlinks = 40

// errLinkLoop is returned for a path whose links do not end.
var errLinkLoop = errors.New("too many levels of symbolic links")

// ResolveIn resolves rel (relative to root, or absolute within it) as if root were the
// filesystem's "/": every symbolic link is followed inside root, an absolute target from root,
// and ".." never climbs above root. A driver container's root holds absolute links
// (/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 -> /usr/lib/…/libnvidia-ml.so.580.82.07) that,
// followed from the host's "/", would reach the host's own driver, or nothing. It returns the
// resolved path relative to root, without a leading slash; the last component need not exist.
func ResolveIn(root, rel string) (string, error) {
	var done []string // resolved components
	todo := splitPath(rel)
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case ".":
			continue
		case "..":
			if len(done) > 0 {
				done = done[:len(done)-1]
			}
			continue
		}
		cur := path.Join(append(append([]string{}, done...), c)...)
		fi, err := os.Lstat(filepath.Join(root, cur))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return path.Join(append([]string{cur}, todo...)...), nil
			}
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = append(done, c)
			continue
		}
		if links++; links > maxSymlinks {
			return "", fmt.Errorf("%s: %w", rel, errLinkLoop)
		}
		target, err := os.Readlink(filepath.Join(root, cur))
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			done = nil
		}
		todo = append(splitPath(target), todo...)
	}
	return path.Join(done...), nil
}

func splitPath(p string) []string {
	var out []string
	for c := range strings.SplitSeq(p, "/") {
		if c != "" {
			out = append(out, c)
		}
	}
	return out
}

// Lookup is one search of a driver root: what was found, and every place looked at, so that a
// miss can say where the file was expected.
type Lookup struct {
	// Rel is the found file's path relative to the root, every link resolved inside it; "" when
	// not found.
	Rel string
	// Tried are the places looked at, as paths the plugin reads (below the container root).
	Tried []string
}

// Find looks for name in dirs of root r (executable when exec), then, for a library
// (useCache), in the root's loader cache. The first regular file wins.
func (r Root) Find(dirs []string, name string, exec, useCache bool) Lookup {
	var l Lookup
	try := func(rel string) bool {
		l.Tried = append(l.Tried, filepath.Join(r.Container, rel))
		resolved, err := ResolveIn(r.Container, rel)
		if err != nil {
			return false
		}
		fi, err := os.Stat(filepath.Join(r.Container, resolved))
		if err != nil || !fi.Mode().IsRegular() || (exec && fi.Mode().Perm()&0o111 == 0) {
			return false
		}
		l.Rel = resolved
		return true
	}
	if useCache {
		cache := filepath.Join(r.Container, ldCachePath)
		if data, err := os.ReadFile(cache); err == nil {
			entries, err := ParseLDCache(data)
			if err == nil {
				for _, e := range entries {
					if e.Name == name && e.Arch == CacheArch() && try(e.Path) {
						return l
					}
				}
			}
			l.Tried = append(l.Tried, cache)
		}
	}
	for _, d := range dirs {
		if try(path.Join(d, name)) {
			return l
		}
	}
	return l
}

// Miss is a file not found under a driver root, naming every place tried.
func (r Root) Miss(name string, l Lookup, hint string) error {
	return fmt.Errorf("NVIDIA driver root %s (read at %s) has no %s: tried %s%s",
		r.Host, r.Container, name, strings.Join(l.Tried, ", "), hint)
}

// FindNVML returns the path, as the plugin reads it, of the root's libnvidia-ml.so.1 with every
// link resolved inside the root ("" when there is none), and the search.
func (r Root) FindNVML() (string, Lookup) {
	l := r.Find(LibDirs, NVMLLibrary, false, true)
	if l.Rel == "" {
		return "", l
	}
	return filepath.Join(r.Container, l.Rel), l
}

// NVMLLibrary is the NVML library's soname, what every NVML user loads.
const NVMLLibrary = "libnvidia-ml.so.1"

// driverLibPrefixes are the names of the NVIDIA driver's own libraries; the C and C++ runtime
// and the rest of what a binary links come from the daemon's image.
var driverLibPrefixes = []string{"libnvidia-", "libcuda"}

func isDriverLib(name string) bool {
	for _, p := range driverLibPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// NeededDriverLibs returns the driver libraries (by soname) that the ELF files bins (paths
// relative to the root) link, and the ones those link in turn, each with where it lies in the
// root; a needed driver library the root lacks is an error naming it and who needs it. Not
// an ELF file (a wrapper script): no needs.
func (r Root) NeededDriverLibs(bins []string) (map[string]string, error) {
	found := map[string]string{}
	queue := append([]string{}, bins...)
	for len(queue) > 0 {
		rel := queue[0]
		queue = queue[1:]
		needs, err := elfNeeds(filepath.Join(r.Container, rel))
		if err != nil {
			return nil, err
		}
		for _, name := range needs {
			if !isDriverLib(name) {
				continue
			}
			if _, ok := found[name]; ok {
				continue
			}
			l := r.Find(LibDirs, name, false, true)
			if l.Rel == "" {
				return nil, r.Miss(name, l, fmt.Sprintf(" (needed by %s)", path.Base(rel)))
			}
			found[name] = l.Rel
			queue = append(queue, l.Rel)
		}
	}
	return found, nil
}

// elfNeeds lists the DT_NEEDED entries of an ELF file; a file that is not ELF needs nothing.
func elfNeeds(p string) ([]string, error) {
	magic := make([]byte, len(elf.ELFMAG))
	fh, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	n, _ := io.ReadFull(fh, magic)
	_ = fh.Close()
	if n < len(magic) || string(magic) != elf.ELFMAG {
		return nil, nil
	}
	f, err := elf.Open(p)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	defer func() { _ = f.Close() }()
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("reading the libraries %s links: %w", p, err)
	}
	return libs, nil
}
