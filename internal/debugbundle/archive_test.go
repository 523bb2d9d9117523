package debugbundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// readArchive returns the archive's files by path, in order.
func readArchive(t *testing.T, data []byte) ([]string, map[string]string) {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	files := map[string]string{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names, files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
		files[hdr.Name] = string(b)
	}
}

func TestArchiveManifest(t *testing.T) {
	var buf bytes.Buffer
	created := time.Date(2026, 12, 7, 18, 0, 0, 0, time.UTC)
	a := NewArchive(&buf, created, "1.2.3")
	if err := a.Add("logs/ns/pod/c.log", "a log", []byte("Authorization: Bearer abc\n")); err != nil {
		t.Fatal(err)
	}
	if err := a.AddJSON("/../status/planes.json", "planes", map[string]string{"token": "x"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Add("logs/ns/pod/c.log", "again", []byte("second")); err != nil {
		t.Fatal(err)
	}
	a.Fail("logs/ns/other/c.log", errors.New("pod has no node:\n bearer zzz"))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	names, files := readArchive(t, buf.Bytes())
	wantNames := []string{"logs/ns/pod/c.log", "status/planes.json", "logs/ns/pod/c-2.log", ErrorsFile, ManifestFile}
	if diff := cmp.Diff(wantNames, names); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	var m Manifest
	if err := json.Unmarshal([]byte(files[ManifestFile]), &m); err != nil {
		t.Fatal(err)
	}
	want := Manifest{
		CreatedAt: created, Version: "1.2.3",
		Files: []File{
			{Path: "logs/ns/pod/c.log", Bytes: len("Authorization: Bearer REDACTED\n"), Description: "a log"},
			{Path: "status/planes.json", Bytes: len(files["status/planes.json"]), Description: "planes"},
			{Path: "logs/ns/pod/c-2.log", Bytes: len("second"), Description: "again"},
			{Path: ErrorsFile, Bytes: len(files[ErrorsFile]), Description: "the steps that failed, one a line (also in manifest.json)"},
		},
		Failures: []Failure{{Step: "logs/ns/other/c.log", Error: "pod has no node: bearer REDACTED"}},
	}
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("manifest (-want +got):\n%s", diff)
	}
	if got, want := files[ErrorsFile], "logs/ns/other/c.log: pod has no node: bearer REDACTED\n"; got != want {
		t.Errorf("errors.txt %q, want %q", got, want)
	}
	if got := files["status/planes.json"]; got != "{\n  \"token\": \"REDACTED\"\n}\n" {
		t.Errorf("planes.json not redacted: %q", got)
	}
}

func TestArchiveEmptyManifest(t *testing.T) {
	var buf bytes.Buffer
	if err := NewArchive(&buf, time.Unix(0, 0), "v").Close(); err != nil {
		t.Fatal(err)
	}
	_, files := readArchive(t, buf.Bytes())
	if files[ErrorsFile] != "" {
		t.Errorf("errors.txt %q, want empty", files[ErrorsFile])
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(files[ManifestFile]), &m); err != nil {
		t.Fatal(err)
	}
	// Lists, never null: scripts iterate them.
	if _, ok := m["failures"].([]any); !ok {
		t.Errorf("failures is %T, want a list", m["failures"])
	}
}

func TestCleanPath(t *testing.T) {
	cases := map[string]string{
		"a/b.json":          "a/b.json",
		"/../../etc/passwd": "etc/passwd",
		"nodes/n 1/x:y":     "nodes/n_1/x_y",
		"":                  "_",
		"a//b/./c":          "a/b/c",
	}
	for in, want := range cases {
		if got := CleanPath(in); got != want {
			t.Errorf("CleanPath(%q) = %q, want %q", in, got, want)
		}
	}
}
