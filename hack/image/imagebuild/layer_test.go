package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestFSAdd(t *testing.T) {
	fs := NewFS()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(fs.File("./etc/passwd", 0o644, []byte("a")))
	must(fs.File("/etc/passwd", 0o644, []byte("a"))) // the same file again: fine
	must(fs.Dir("etc", 0o700, 1, 1))                 // a directory again: the first stays
	if err := fs.File("etc/passwd", 0o644, []byte("b")); err == nil || !strings.Contains(err.Error(), "etc/passwd is provided twice") {
		t.Errorf("a second, different etc/passwd: %v, want an error", err)
	}
	if got := fs.Get("etc"); got.Mode != 0o755 || got.UID != 0 {
		t.Errorf("etc is %v uid %d, want the first directory's 0755 root", got.Mode, got.UID)
	}
}

// A layer lists its entries sorted, a directory before its contents, with the given time and
// no owner names, and the same tree gives the same bytes.
func TestWriteLayer(t *testing.T) {
	build := func() *FS {
		fs := NewFS()
		for _, e := range []*Entry{
			{Name: "usr/local/bin/b", Type: tar.TypeReg, Mode: 0o755, Data: []byte("bb")},
			{Name: "lib64/ld.so", Type: tar.TypeSymlink, Mode: 0o777, Link: "/lib/x/ld.so"},
			{Name: "tmp", Type: tar.TypeDir, Mode: modeOf(0o1777)},
			{Name: "home/nonroot", Type: tar.TypeDir, Mode: 0o700, UID: NonrootUID, GID: NonrootUID},
		} {
			if err := fs.Dir(filepath.Dir(e.Name), 0o755, 0, 0); err != nil {
				t.Fatal(err)
			}
			if err := fs.Add(e); err != nil {
				t.Fatal(err)
			}
		}
		return fs
	}
	dir := t.TempDir()
	mtime := time.Unix(1700000000, 0)
	var layers [][]byte
	for i, fs := range []*FS{build(), build()} {
		p := filepath.Join(dir, string(rune('a'+i)))
		if err := fs.WriteLayer(p, mtime); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, data)
	}
	if !bytes.Equal(layers[0], layers[1]) {
		t.Error("the same tree gave two different layers")
	}
	zr, err := gzip.NewReader(bytes.NewReader(layers[0]))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(mtime) || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: time %v, owner %q:%q; want %v and no names", h.Name, h.ModTime, h.Uname, h.Gname, mtime)
		}
		got = append(got, fmt.Sprintf("%s %o %d", h.Name, h.Mode, h.Uid))
	}
	want := []string{
		"home/ 755 0", "home/nonroot/ 700 65532", "lib64/ 755 0", "lib64/ld.so 777 0",
		"tmp/ 1777 0", "usr/ 755 0", "usr/local/ 755 0", "usr/local/bin/ 755 0", "usr/local/bin/b 755 0",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("layer entries (-want +got):\n%s", diff)
	}
}
