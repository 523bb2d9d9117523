package driverroot

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// layout makes a root from files (path: content; a content starting with "-> " is a symlink to
// the rest) and returns it.
func layout(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for rel, content := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "-> "); ok {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestResolveIn(t *testing.T) {
	root := layout(t, map[string]string{
		"usr/lib64/libnvidia-ml.so.580.82.07": "lib",
		"usr/lib64/libnvidia-ml.so.1":         "-> libnvidia-ml.so.580.82.07",
		// A driver container's absolute link: from the host's "/" it would reach the host's
		// own library (or nothing); inside the root it reaches the container's.
		"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1": "-> /usr/lib64/libnvidia-ml.so.1",
		"lib64":          "-> usr/lib64",
		"escape/up":      "-> ../../../../../etc/passwd",
		"loop/a":         "-> b",
		"loop/b":         "-> a",
		"dangling/link":  "-> /nowhere/at/all",
		"abs/to/outside": "-> /etc/hostname",
	})
	for name, tc := range map[string]struct {
		rel, want string
		wantErr   error
	}{
		"relative link":          {rel: "usr/lib64/libnvidia-ml.so.1", want: "usr/lib64/libnvidia-ml.so.580.82.07"},
		"absolute link in root":  {rel: "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", want: "usr/lib64/libnvidia-ml.so.580.82.07"},
		"linked directory":       {rel: "lib64/libnvidia-ml.so.1", want: "usr/lib64/libnvidia-ml.so.580.82.07"},
		"leading slash":          {rel: "/lib64/libnvidia-ml.so.1", want: "usr/lib64/libnvidia-ml.so.580.82.07"},
		".. stops at the root":   {rel: "escape/up", want: "etc/passwd"},
		"absolute stays in root": {rel: "abs/to/outside", want: "etc/hostname"},
		"dangling":               {rel: "dangling/link", want: "nowhere/at/all"},
		"missing":                {rel: "usr/bin/nvidia-imex", want: "usr/bin/nvidia-imex"},
		"loop":                   {rel: "loop/a", wantErr: errLinkLoop},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ResolveIn(root, tc.rel)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("ResolveIn(%q) = %q, want %q", tc.rel, got, tc.want)
			}
		})
	}
}

func TestFind(t *testing.T) {
	lib := "usr/lib/" + LibTriplet()
	cases := map[string]struct {
		files    map[string]string
		want     string
		wantMiss []string
	}{
		"lib64 first": {
			files: map[string]string{"usr/lib64/libnvidia-ml.so.1": "a", lib + "/libnvidia-ml.so.1": "b"},
			want:  "usr/lib64/libnvidia-ml.so.1",
		},
		"triplet": {
			files: map[string]string{lib + "/libnvidia-ml.so.580.82.07": "x", lib + "/libnvidia-ml.so.1": "-> libnvidia-ml.so.580.82.07"},
			want:  lib + "/libnvidia-ml.so.580.82.07",
		},
		"absolute link of a driver container": {
			files: map[string]string{"usr/lib64/libnvidia-ml.so.580.82.07": "x", lib + "/libnvidia-ml.so.1": "-> /usr/lib64/libnvidia-ml.so.580.82.07"},
			want:  "usr/lib64/libnvidia-ml.so.580.82.07",
		},
		"link leaving the root is not followed out": {
			files:    map[string]string{"usr/lib64/libnvidia-ml.so.1": "-> /../../../../usr/lib/x86_64-linux-gnu/libc.so.6"},
			wantMiss: []string{"usr/lib64/libnvidia-ml.so.1", lib + "/libnvidia-ml.so.1", "lib64/libnvidia-ml.so.1", "lib/" + LibTriplet() + "/libnvidia-ml.so.1", "usr/lib/libnvidia-ml.so.1"},
		},
		"a directory is not the library": {
			files:    map[string]string{"usr/lib64/libnvidia-ml.so.1/x": "x"},
			wantMiss: []string{"usr/lib64/libnvidia-ml.so.1"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := Root{Host: "/run/nvidia/driver", Container: layout(t, tc.files)}
			p, l := r.FindNVML()
			if tc.want != "" {
				if p != filepath.Join(r.Container, tc.want) || l.Rel != tc.want {
					t.Fatalf("FindNVML = %q (%q), want %q", p, l.Rel, tc.want)
				}
				return
			}
			if p != "" {
				t.Fatalf("FindNVML = %q, want a miss", p)
			}
			err := r.Miss(NVMLLibrary, l, "")
			for _, w := range append(tc.wantMiss, "NVIDIA driver root /run/nvidia/driver", "has no libnvidia-ml.so.1") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("miss %q does not name %q", err, w)
				}
			}
		})
	}
}

// cc compiles a shared library from C source with a soname and extra linker arguments.
func cc(t *testing.T, out, soname, src string, args ...string) {
	t.Helper()
	compiler, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	c := filepath.Join(t.TempDir(), "x.c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	cmdArgs := append([]string{"-shared", "-fPIC", "-o", out, c, "-Wl,-soname," + soname}, args...)
	if b, err := exec.Command(compiler, cmdArgs...).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, b)
	}
}

// The root's loader cache, as ldconfig writes it, is read first: a library in a directory no
// search list names is found through it.
func TestFindThroughLoaderCache(t *testing.T) {
	ldconfig, err := exec.LookPath("ldconfig")
	if err != nil {
		ldconfig = "/sbin/ldconfig"
		if _, err := os.Stat(ldconfig); err != nil {
			t.Skip("no ldconfig")
		}
	}
	root := t.TempDir()
	cc(t, filepath.Join(root, "opt/nvidia/lib/libnvidia-ml.so.580.82.07"), "libnvidia-ml.so.1", "int nvmlInit_v2(void){return 0;}")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte("/opt/nvidia/lib\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(ldconfig, "-r", root).CombinedOutput(); err != nil {
		t.Fatalf("ldconfig -r: %v\n%s", err, b)
	}
	data, err := os.ReadFile(filepath.Join(root, "etc/ld.so.cache"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := ParseLDCache(data)
	if err != nil {
		t.Fatal(err)
	}
	want := []LDCacheEntry{{Name: "libnvidia-ml.so.1", Path: "/opt/nvidia/lib/libnvidia-ml.so.1", Arch: CacheArch()}}
	if diff := cmp.Diff(want, entries); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	r := Root{Host: "/", Container: root}
	if _, l := r.FindNVML(); l.Rel != "opt/nvidia/lib/libnvidia-ml.so.580.82.07" {
		t.Errorf("FindNVML through the cache = %q (tried %v)", l.Rel, l.Tried)
	}
}

// This machine's own loader cache parses, and names libc for this architecture.
func TestParseHostLoaderCache(t *testing.T) {
	data, err := os.ReadFile("/etc/ld.so.cache")
	if err != nil {
		t.Skip("no /etc/ld.so.cache")
	}
	entries, err := ParseLDCache(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name == "libc.so.6" && e.Arch == CacheArch() {
			return
		}
	}
	t.Errorf("no libc.so.6 of this architecture among %d entries", len(entries))
}

func TestNeededDriverLibs(t *testing.T) {
	root := t.TempDir()
	lib := filepath.Join(root, "usr/lib64")
	cc(t, filepath.Join(lib, "libnvidia-base.so.580.82.07"), "libnvidia-base.so.1", "int base(void){return 1;}")
	if err := os.Symlink("libnvidia-base.so.580.82.07", filepath.Join(lib, "libnvidia-base.so.1")); err != nil {
		t.Fatal(err)
	}
	// libnvidia-top links libnvidia-base: both are needed, the second through the first.
	cc(t, filepath.Join(lib, "libnvidia-top.so.1"), "libnvidia-top.so.1", "int base(void); int top(void){return base();}",
		"-L"+lib, "-l:libnvidia-base.so.1")
	cc(t, filepath.Join(root, "usr/bin/nvidia-imex"), "nvidia-imex", "int top(void); int run(void){return top();}",
		"-L"+lib, "-l:libnvidia-top.so.1")
	r := Root{Host: "/", Container: root}
	got, err := r.NeededDriverLibs([]string{"usr/bin/nvidia-imex"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"libnvidia-top.so.1": "usr/lib64/libnvidia-top.so.1", "libnvidia-base.so.1": "usr/lib64/libnvidia-base.so.580.82.07"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("needed (-want +got):\n%s", diff)
	}
	if err := os.Remove(filepath.Join(lib, "libnvidia-base.so.580.82.07")); err != nil {
		t.Fatal(err)
	}
	_, err = r.NeededDriverLibs([]string{"usr/bin/nvidia-imex"})
	if err == nil || !strings.Contains(err.Error(), "no libnvidia-base.so.1") || !strings.Contains(err.Error(), "needed by libnvidia-top.so.1") {
		t.Errorf("missing library: %v, want it named with who needs it", err)
	}
	// A script is no ELF file: nothing needed.
	if err := os.WriteFile(filepath.Join(root, "usr/bin/wrapper"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := r.NeededDriverLibs([]string{"usr/bin/wrapper"}); err != nil || len(got) != 0 {
		t.Errorf("script: %v, %v", got, err)
	}
}

func FuzzParseLDCache(f *testing.F) {
	if data, err := os.ReadFile("/etc/ld.so.cache"); err == nil && len(data) < 1<<16 {
		f.Add(data)
	}
	f.Add([]byte(ldCacheNewMagic))
	f.Add([]byte(ldCacheOldMagic + "\x00\xff\xff\xff\xff"))
	f.Add(append([]byte(ldCacheNewMagic), make([]byte, 28)...))
	hdr := append([]byte(ldCacheNewMagic), 1, 0, 0, 0, 0, 0, 0, 0)
	hdr = append(hdr, make([]byte, 20)...)
	f.Add(append(hdr, make([]byte, 24)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := ParseLDCache(data)
		if err != nil && !errors.Is(err, errLDCache) {
			t.Fatalf("error %v does not wrap errLDCache", err)
		}
		if err == nil && len(entries) > len(data)/ldCacheNewEntry {
			t.Fatalf("%d entries from %d bytes", len(entries), len(data))
		}
	})
}

// readLayout materializes a layout file of testdata (see its header) under a new root: regular
// files empty, links as listed.
func readLayout(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for line := range strings.SplitSeq(string(data), "\n") {
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "f "):
			files[strings.TrimPrefix(line, "f ")] = ""
		case strings.HasPrefix(line, "l "):
			p, target, ok := strings.Cut(strings.TrimPrefix(line, "l "), " -> ")
			if !ok {
				t.Fatalf("%s: bad line %q", name, line)
			}
			files[p] = "-> " + target
		default:
			t.Fatalf("%s: bad line %q", name, line)
		}
	}
	return layout(t, files)
}

// A real driver install's layout: Debian's, where libnvidia-ml.so.1 in the multiarch directory
// is an absolute link through /etc/alternatives into nvidia/current. Followed from the reader's
// own "/" (a driver root mounted elsewhere) it would lead nowhere, or to another driver.
func TestFindInARealDriverLayout(t *testing.T) {
	arch := map[string]string{"x86_64-linux-gnu": "amd64", "aarch64-linux-gnu": "arm64"}[LibTriplet()]
	root := readLayout(t, "debian-bookworm-libnvidia-ml1-535.261.03-"+arch+".layout")
	r := Root{Host: "/run/nvidia/driver", Container: root}
	p, l := r.FindNVML()
	want := "usr/lib/" + LibTriplet() + "/nvidia/current/libnvidia-ml.so.535.261.03"
	if l.Rel != want || p != filepath.Join(root, want) {
		t.Fatalf("FindNVML = %q (tried %v), want %s", l.Rel, l.Tried, want)
	}
}
