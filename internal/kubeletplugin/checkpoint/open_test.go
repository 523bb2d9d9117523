package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// logLines collects what a logger writes at the verbosity it is made with.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger(verbosity int) logr.Logger {
	return funcr.New(func(_, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{Verbosity: verbosity})
}

func (l *logLines) matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

func loggingContext(t *testing.T, l *logLines) context.Context {
	return klog.NewContext(t.Context(), l.logger(0))
}

// A checkpoint that cannot be read is renamed aside, never deleted or overwritten, the plugin
// starts empty, and one V(0) line names the file, where it went, why, and what that means.
func TestOpenCheckpointSetsUnreadableAside(t *testing.T) {
	v2 := string(readFixture(t, "nvidia-v2.json"))
	cases := map[string]struct {
		data string
		// earlier are files already set aside at the same second.
		earlier int
		want    string
	}{
		"not JSON":                      {data: `{"version":1,"claims":`, want: "is corrupt"},
		"empty":                         {data: ``, want: "is corrupt"},
		"JSON but no object":            {data: `[1,2]`, want: "is corrupt"},
		"null":                          {data: `null`, want: "neither this plugin's checkpoint"},
		"a later version of ours":       {data: `{"version":2,"claims":{}}`, want: "has version 2, this plugin reads version 1"},
		"ours without version":          {data: `{"claims":{}}`, want: "neither this plugin's checkpoint (it has no version) nor NVIDIA's (it has no checksum)"},
		"NVIDIA's failing its checksum": {data: strings.Replace(v2, `"trainer-1-channel"`, `"trainer-9-channel"`, 1), want: "is NVIDIA's checkpoint, but its v2 section fails its checksum"},
		"NVIDIA's of a later version":   {data: withChecksum(`{"checksum":0,"v3":{}}`), want: "is NVIDIA's checkpoint, but it has no section this plugin reads"},
		"again in the same second":      {data: `{"version":7}`, earlier: 2, want: "has version 7"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := stateDirWith(t, []byte(tc.data))
			path := filepath.Join(dir, File)
			want := map[string]string{}
			for i := 1; i <= tc.earlier; i++ {
				earlier := File + fxAside
				if i > 1 {
					earlier += "-" + strconvU(uint64(i))
				}
				want[earlier] = "set aside before " + earlier
				if err := os.WriteFile(filepath.Join(dir, earlier), []byte(want[earlier]), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			aside := File + fxAside
			if tc.earlier > 0 {
				aside += "-" + strconvU(uint64(tc.earlier+1))
			}
			want[aside] = tc.data
			var logs logLines
			s, err := fixtureOpener(fxBoot).Open(loggingContext(t, &logs), dir)
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			if got := s.Snapshot(); len(got) != 0 {
				t.Errorf("started with %v, want no claims", got)
			}
			if diff := cmp.Diff(want, dirFiles(t, dir)); diff != "" {
				t.Errorf("state directory (-want +got):\n%s", diff)
			}
			lines := logs.matching("Checkpoint cannot be read")
			if len(lines) != 1 {
				t.Fatalf("log lines about it: %q, want one", logs.lines)
			}
			for _, part := range []string{`"file"="` + path + `"`, `"keptAs"="` + filepath.Join(dir, aside) + `"`, tc.want,
				"the claims prepared before are not known", "their unprepare succeeds without undoing anything"} {
				if !strings.Contains(lines[0], part) {
					t.Errorf("log line %s lacks %q", lines[0], part)
				}
			}
			// The plugin works on: its first change writes a checkpoint in its format.
			if err := s.Put("a", ClaimEntry{State: PrepareStarted}); err != nil {
				t.Fatal(err)
			}
			if _, err := Read(path); err != nil {
				t.Errorf("after the first change: %v", err)
			}
		})
	}
}

// Failures to read or move the file are errors: they are not the file's content.
func TestOpenCheckpointIOErrors(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, File), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := fixtureOpener(fxBoot).Open(t.Context(), dir)
	var unreadable *UnreadableCheckpointError
	if err == nil || errors.As(err, &unreadable) {
		t.Errorf("a checkpoint that is a directory: %v, want an I/O error", err)
	}
}

// The copy of NVIDIA's checkpoint never overwrites another file; one that already holds the
// same bytes (a take-over stopped before it wrote the converted checkpoint) is used again.
func TestOpenCheckpointKeepsNVIDIAsCopy(t *testing.T) {
	original := readFixture(t, "nvidia-v1.json")
	kept := File + ".nvidia-v1.bak"
	cases := map[string]struct {
		before   map[string]string
		wantKept string
	}{
		"first take-over":       {wantKept: kept},
		"stopped take-over":     {before: map[string]string{kept: string(original)}, wantKept: kept},
		"another file so named": {before: map[string]string{kept: "older"}, wantKept: File + ".nvidia-v1-2.bak"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := stateDirWith(t, original)
			for f, content := range tc.before {
				if err := os.WriteFile(filepath.Join(dir, f), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var logs logLines
			if _, err := fixtureOpener(fxBoot).Open(loggingContext(t, &logs), dir); err != nil {
				t.Fatal(err)
			}
			files := dirFiles(t, dir)
			if files[tc.wantKept] != string(original) {
				t.Errorf("the original is not in %s; the directory holds %v", tc.wantKept, keys(files))
			}
			for f, content := range tc.before {
				if files[f] != content {
					t.Errorf("%s changed", f)
				}
			}
			names := map[string]bool{File: true, tc.wantKept: true}
			for f := range tc.before {
				names[f] = true
			}
			if len(files) != len(names) {
				t.Errorf("the directory holds %v, want %v", keys(files), keys(names))
			}
			lines := logs.matching("Took over NVIDIA's checkpoint")
			if len(lines) != 1 || !strings.Contains(lines[0], `"keptAs"="`+filepath.Join(dir, tc.wantKept)+`"`) ||
				!strings.Contains(lines[0], `"nvidiaFormat"="v1"`) || !strings.Contains(lines[0], `"claims"=2`) {
				t.Errorf("log lines %q, want one saying where the original is", logs.lines)
			}
		})
	}
}

// The claims that had to be guessed at, and a reboot since NVIDIA's checkpoint, are said at V(0).
func TestOpenCheckpointSaysWhatItGuessed(t *testing.T) {
	var logs logLines
	if _, err := fixtureOpener("another-boot").Open(loggingContext(t, &logs), stateDirWith(t, readFixture(t, "nvidia-v2-bootid.json"))); err != nil {
		t.Fatal(err)
	}
	if got := logs.matching("written before the node rebooted"); len(got) != 1 || !strings.Contains(got[0], `"claims"=2`) {
		t.Errorf("log lines %q, want one saying that 2 claims are marked PrepareStarted", logs.lines)
	}
	logs = logLines{}
	// A state and a section of a later layout: the section a later NVIDIA plugin would add is
	// ignored as NVIDIA's own older readers ignore it, v2 is read.
	odd := withV2Checksum(`{"checksum":0,"v1":{},"v2":{"checksum":0,"preparedClaims":{"a":{"checkpointState":"PrepareSomething","status":{}}}},"v3":{}}`)
	s, err := fixtureOpener(fxBoot).Open(loggingContext(t, &logs), stateDirWith(t, []byte(odd)))
	if err != nil {
		t.Fatal(err)
	}
	want := map[types.UID]ClaimEntry{"a": {State: PrepareStarted, CDISpec: "k8s.compute-domain.nvidia.com-claim_a.yaml"}}
	if diff := cmp.Diff(want, s.Snapshot()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	got := logs.matching(`"claimUID"="a"`)
	if later := logs.matching("Took over NVIDIA's checkpoint"); len(later) != 1 || !strings.Contains(later[0], `"ignoredSections"=["v3"]`) {
		t.Errorf("log lines %q, want the take-over naming the section it ignored", logs.lines)
	}
	if len(got) != 1 || !strings.Contains(got[0], `PrepareSomething`) || !strings.Contains(got[0], "is not one this plugin knows") ||
		!strings.Contains(got[0], "names no channel or daemon device") {
		t.Errorf("log lines %q, want one about claim a", logs.lines)
	}
}

// FuzzDecodeCheckpoint: whatever a checkpoint file holds, decoding it gives this plugin's
// checkpoint, NVIDIA's claims, or an *UnreadableCheckpointError, and never panics.
func FuzzDecodeCheckpoint(f *testing.F) {
	entries, err := os.ReadDir(filepath.Join("testdata", "checkpoints"))
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			data, err := os.ReadFile(filepath.Join("testdata", "checkpoints", e.Name()))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	for _, bad := range []string{
		``, `null`, `[]`, `{"version":1,"claims":`, `{"version":2}`, `{"claims":{}}`,
		`{"checksum":"x"}`, `{"checksum":-1}`, `{"checksum":1e3,"v1":{}}`, `{"checksum":0,"v2":null}`,
		`{"checksum":0,"v2":{"checksum":0,"preparedClaims":{"":{}}}}`,
		`{"checksum":0,"v1":{"preparedClaims":{"a":null}}}`,
		`{"checksum":0,"v1":{"preparedClaims":{"a":[null,{"devices":[{"channel":{"device":null}}]}]}}}`,
		`{"checksum":18446744073709551616}`,
	} {
		f.Add([]byte(bad))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Decode("f", data)
		cp, nv := d.Checkpoint, d.nvidia
		var unreadable *UnreadableCheckpointError
		switch {
		case err != nil && !errors.As(err, &unreadable):
			t.Errorf("error %v is not an *UnreadableCheckpointError", err)
		case err == nil && nv == nil && cp.Version != Version:
			t.Errorf("decoded version %d", cp.Version)
		case err == nil && nv != nil && nv.Claims == nil:
			t.Error("NVIDIA's checkpoint without a claim map")
		}
	})
}
