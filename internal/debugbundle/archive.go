package debugbundle

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"sync"
	"time"
)

// Names of the bundle's own files.
const (
	ManifestFile = "manifest.json"
	ErrorsFile   = "errors.txt"
)

// Manifest is the bundle's manifest.json: every other file in the bundle, and every step that
// failed. Its field names are stable: fields may be added, never renamed or removed.
type Manifest struct {
	// CreatedAt is when the bundle was started.
	CreatedAt time.Time `json:"createdAt"`
	// Version is the cdplane version that wrote it.
	Version string `json:"version"`
	// Files are the bundle's files other than manifest.json, in the order written.
	Files []File `json:"files"`
	// Failures are the steps that failed, in the order they failed (errors.txt has the same,
	// one a line).
	Failures []Failure `json:"failures"`
}

// File is one file of the bundle.
type File struct {
	// Path is the file's path within the archive.
	Path string `json:"path"`
	// Bytes is its size, after redaction.
	Bytes int `json:"bytes"`
	// Description says what it holds.
	Description string `json:"description"`
}

// Failure is a step that failed: what was to be collected, and the error.
type Failure struct {
	// Step names what was to be collected (a file path or a step like "logs of pod ns/name").
	Step  string `json:"step"`
	Error string `json:"error"`
}

// Archive writes a bundle: a gzipped tar whose every file is redacted (Redact) as it is added,
// recorded in the manifest, and closed by errors.txt and manifest.json. Its methods may be
// called from several goroutines.
type Archive struct {
	mu       sync.Mutex
	gz       *gzip.Writer
	tw       *tar.Writer
	manifest Manifest
	paths    map[string]bool
	err      error
}

// NewArchive starts a bundle on w, with the manifest's creation time and version.
func NewArchive(w io.Writer, createdAt time.Time, version string) *Archive {
	gz := gzip.NewWriter(w)
	return &Archive{
		gz: gz, tw: tar.NewWriter(gz), paths: map[string]bool{},
		manifest: Manifest{CreatedAt: createdAt.UTC(), Version: version, Files: []File{}, Failures: []Failure{}},
	}
}

// Add writes a file, redacted, and records it in the manifest. A path given twice gets a
// numbered suffix. It returns only an error of writing the archive itself.
func (a *Archive) Add(name, description string, data []byte) error {
	data = Redact(data)
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.add(name, description, data)
}

// AddJSON writes v as indented JSON (Add).
func (a *Archive) AddJSON(name, description string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		a.Fail(name, fmt.Errorf("encoding JSON: %w", err))
		return nil
	}
	return a.Add(name, description, append(data, '\n'))
}

func (a *Archive) add(name, description string, data []byte) error {
	if a.err != nil {
		return a.err
	}
	name = uniquePath(CleanPath(name), a.paths)
	a.paths[name] = true
	hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: a.manifest.CreatedAt, Typeflag: tar.TypeReg}
	if err := a.tw.WriteHeader(hdr); err != nil {
		a.err = fmt.Errorf("writing %s into the bundle: %w", name, err)
		return a.err
	}
	if _, err := a.tw.Write(data); err != nil {
		a.err = fmt.Errorf("writing %s into the bundle: %w", name, err)
		return a.err
	}
	if name != ManifestFile {
		a.manifest.Files = append(a.manifest.Files, File{Path: name, Bytes: len(data), Description: description})
	}
	return nil
}

// Fail records a step that failed; the bundle goes on.
func (a *Archive) Fail(step string, err error) {
	msg := strings.Join(strings.Fields(string(Redact([]byte(err.Error())))), " ")
	a.mu.Lock()
	defer a.mu.Unlock()
	a.manifest.Failures = append(a.manifest.Failures, Failure{Step: step, Error: msg})
}

// Manifest returns a copy of the manifest as it stands.
func (a *Archive) Manifest() Manifest {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := a.manifest
	m.Files, m.Failures = slices.Clone(m.Files), slices.Clone(m.Failures)
	return m
}

// Close writes errors.txt (always, empty when nothing failed) and manifest.json, and ends the
// archive. It does not close the writer given to NewArchive.
func (a *Archive) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs strings.Builder
	for _, f := range a.manifest.Failures {
		fmt.Fprintf(&errs, "%s: %s\n", f.Step, f.Error)
	}
	_ = a.add(ErrorsFile, "the steps that failed, one a line (also in manifest.json)", []byte(errs.String()))
	data, err := json.MarshalIndent(a.manifest, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the manifest: %w", err)
	}
	_ = a.add(ManifestFile, "", Redact(append(data, '\n')))
	return errors.Join(a.err, a.tw.Close(), a.gz.Close())
}

// CleanPath makes name a relative slash path within the archive: no leading slash, no "..",
// no empty or odd elements (characters outside [A-Za-z0-9._-] become '_').
func CleanPath(name string) string {
	var parts []string
	for _, p := range strings.Split(path.Clean("/"+name), "/") {
		if p == "" || p == "." || p == ".." {
			continue
		}
		parts = append(parts, strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
				return r
			}
			return '_'
		}, p))
	}
	if len(parts) == 0 {
		return "_"
	}
	return strings.Join(parts, "/")
}

// uniquePath returns name, or name with "-2", "-3", ... before its extension when taken.
func uniquePath(name string, taken map[string]bool) string {
	if !taken[name] {
		return name
	}
	ext := path.Ext(name)
	base := strings.TrimSuffix(name, ext)
	for i := 2; ; i++ {
		if n := fmt.Sprintf("%s-%d%s", base, i, ext); !taken[n] {
			return n
		}
	}
}
