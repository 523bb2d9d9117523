package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// Entry is one file of a layer. Everything a layer records of it is here; the rest (times,
// owner names) is fixed when the layer is written, so that the same files give the same bytes.
type Entry struct {
	Name     string // relative, cleaned: "usr/local/bin/cdplane"
	Type     byte   // tar.TypeDir, TypeReg or TypeSymlink
	Mode     fs.FileMode
	UID, GID int
	Link     string // a symlink's target
	Data     []byte
}

// FS is a layer's file tree being assembled.
type FS struct {
	entries map[string]*Entry
}

// NewFS returns an empty tree.
func NewFS() *FS { return &FS{entries: map[string]*Entry{}} }

// clean makes a tar name relative and clean; "" for the root.
func clean(name string) string {
	name = path.Clean("/" + name)
	return strings.TrimPrefix(name, "/")
}

// Add adds an entry. A directory may be added again (the first one's mode and owner stay); any
// other name added twice with different content is an error: two packages would overwrite each
// other's files.
func (fs *FS) Add(e *Entry) error {
	e.Name = clean(e.Name)
	if e.Name == "" {
		return nil
	}
	if old, ok := fs.entries[e.Name]; ok {
		if old.Type == tar.TypeDir && e.Type == tar.TypeDir {
			return nil
		}
		if old.Type == e.Type && old.Link == e.Link && string(old.Data) == string(e.Data) && old.Mode == e.Mode {
			return nil
		}
		return fmt.Errorf("%s is provided twice, differently", e.Name)
	}
	fs.entries[e.Name] = e
	return nil
}

// Dir adds a directory and any missing parents (0755, root).
func (fs *FS) Dir(name string, mode fs.FileMode, uid, gid int) error {
	name = clean(name)
	if dir := path.Dir(name); dir != "." {
		if _, ok := fs.entries[dir]; !ok {
			if err := fs.Dir(dir, 0o755, 0, 0); err != nil {
				return err
			}
		}
	}
	return fs.Add(&Entry{Name: name, Type: tar.TypeDir, Mode: mode, UID: uid, GID: gid})
}

// File adds a regular file owned by root, and its parent directories.
func (fs *FS) File(name string, mode fs.FileMode, data []byte) error {
	if dir := path.Dir(clean(name)); dir != "." {
		if err := fs.Dir(dir, 0o755, 0, 0); err != nil {
			return err
		}
	}
	return fs.Add(&Entry{Name: name, Type: tar.TypeReg, Mode: mode, Data: data})
}

// Get returns the entry name, nil when absent.
func (fs *FS) Get(name string) *Entry { return fs.entries[clean(name)] }

// Names returns every entry's name, sorted.
func (fs *FS) Names() []string {
	names := make([]string, 0, len(fs.entries))
	for n := range fs.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// WriteLayer writes the tree as a gzip-compressed layer tar to path: entries sorted by name
// (a directory before what it holds), every time mtime, owner names empty, gzip without a name
// or time. The same tree gives the same bytes.
func (fs *FS) WriteLayer(p string, mtime time.Time) (err error) {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	zw, err := gzip.NewWriterLevel(f, gzip.DefaultCompression)
	if err != nil {
		return err
	}
	if err := fs.writeTar(zw, mtime); err != nil {
		return err
	}
	return zw.Close()
}

func (fs *FS) writeTar(w io.Writer, mtime time.Time) error {
	tw := tar.NewWriter(w)
	for _, name := range fs.Names() {
		e := fs.entries[name]
		h := &tar.Header{
			Typeflag: e.Type, Name: e.Name, Linkname: e.Link, Uid: e.UID, Gid: e.GID,
			Mode: int64(e.Mode.Perm()), ModTime: mtime, Format: tar.FormatPAX,
		}
		if e.Mode&os.ModeSetuid != 0 {
			h.Mode |= 0o4000
		}
		if e.Mode&os.ModeSetgid != 0 {
			h.Mode |= 0o2000
		}
		if e.Mode&os.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		if e.Type == tar.TypeDir {
			h.Name += "/"
		}
		if e.Type == tar.TypeReg {
			h.Size = int64(len(e.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if e.Type == tar.TypeReg {
			if _, err := tw.Write(e.Data); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// modeOf is the FileMode of Unix permission bits, setuid, setgid and sticky included.
func modeOf(unix uint32) fs.FileMode {
	m := fs.FileMode(unix & 0o777)
	if unix&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if unix&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if unix&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
