package sim

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cdplane/internal/sim/controlplane"
)

// otherUID owns the directories of the "another user's" cases; only root can arrange them.
const otherUID = 4242

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("giving a directory to another user needs root")
	}
}

// simDir returns a state directory made as `sim up` makes it, inside a fresh temporary one.
func simDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	if err := prepareStateDir(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestCheckStateDir(t *testing.T) {
	cases := map[string]struct {
		root bool
		// setup returns the directory to check.
		setup func(t *testing.T) string
		// want are the reasons expected in the error, in order; none: accepted.
		want []string
	}{
		"made by sim up": {
			setup: simDir,
		},
		"missing": {
			setup: func(t *testing.T) string { return filepath.Join(t.TempDir(), "none") },
			want:  []string{"no such file or directory"},
		},
		"no marker": {
			setup: func(t *testing.T) string {
				dir := filepath.Join(t.TempDir(), "state")
				mustDo(t, os.Mkdir(dir, 0o700))
				return dir
			},
			want: []string{"not created by cdplane sim (no marker .cdplane-sim)"},
		},
		"open to others": {
			setup: func(t *testing.T) string {
				dir := simDir(t)
				mustDo(t, os.Chmod(dir, 0o755))
				return dir
			},
			want: []string{"mode 0755, want 0700"},
		},
		"an earlier sim's: no marker, mode 0755": {
			setup: func(t *testing.T) string {
				dir := filepath.Join(t.TempDir(), "state")
				mustDo(t, os.Mkdir(dir, 0o755))
				mustDo(t, os.Chmod(dir, 0o755))
				mustDo(t, os.WriteFile(filepath.Join(dir, stateFile), []byte("{}"), 0o644))
				return dir
			},
			want: []string{"no marker .cdplane-sim", "mode 0755, want 0700"},
		},
		"a symbolic link to a sim's directory": {
			setup: func(t *testing.T) string {
				link := filepath.Join(t.TempDir(), "link")
				mustDo(t, os.Symlink(simDir(t), link))
				return link
			},
			want: []string{"it is a symbolic link"},
		},
		"a file": {
			setup: func(t *testing.T) string {
				path := filepath.Join(t.TempDir(), "file")
				mustDo(t, os.WriteFile(path, nil, 0o600))
				return path
			},
			want: []string{"not a directory"},
		},
		"the marker is a symbolic link": {
			setup: func(t *testing.T) string {
				dir := simDir(t)
				target := filepath.Join(t.TempDir(), "marker")
				mustDo(t, os.Rename(filepath.Join(dir, markerFile), target))
				mustDo(t, os.Symlink(target, filepath.Join(dir, markerFile)))
				return dir
			},
			want: []string{"its marker .cdplane-sim is not a regular file"},
		},
		"the marker holds something else": {
			setup: func(t *testing.T) string {
				dir := simDir(t)
				mustDo(t, os.WriteFile(filepath.Join(dir, markerFile), []byte("hello\n"), 0o600))
				return dir
			},
			want: []string{"its marker .cdplane-sim was not written by cdplane sim"},
		},
		"another user's": {
			root: true,
			setup: func(t *testing.T) string {
				dir := simDir(t)
				mustDo(t, os.Chown(dir, otherUID, otherUID))
				return dir
			},
			want: []string{"owned by uid 4242, not you (uid 0)"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.root {
				requireRoot(t)
			}
			dir := tc.setup(t)
			err := checkStateDir(dir, "remove")
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var unsafe *UnsafeStateDirError
			if !errors.As(err, &unsafe) {
				t.Fatalf("error %v, want an *UnsafeStateDirError", err)
			}
			if !strings.HasPrefix(err.Error(), "refusing to remove "+dir+": ") {
				t.Errorf("error %q does not name the directory", err)
			}
			if len(unsafe.Reasons) != len(tc.want) {
				t.Fatalf("reasons %q, want %q", unsafe.Reasons, tc.want)
			}
			for i, want := range tc.want {
				if !strings.Contains(unsafe.Reasons[i], want) {
					t.Errorf("reason %d is %q, want it to say %q", i, unsafe.Reasons[i], want)
				}
			}
		})
	}
}

func TestPrepareStateDir(t *testing.T) {
	cases := map[string]struct {
		root  bool
		setup func(t *testing.T, dir string)
		// wantErr: refused, with this in the error, and the directory left as it was.
		wantErr string
		// keep is a file that must survive preparing.
		keep string
	}{
		"missing: created": {
			setup: func(*testing.T, string) {},
		},
		"empty, mode 0755, yours: closed and marked": {
			setup: func(t *testing.T, dir string) {
				mustDo(t, os.Mkdir(dir, 0o755))
				mustDo(t, os.Chmod(dir, 0o755))
			},
		},
		"already a sim's: kept": {
			setup: func(t *testing.T, dir string) {
				mustDo(t, prepareStateDir(dir))
				mustDo(t, os.WriteFile(filepath.Join(dir, "logs"), nil, 0o600))
			},
			keep: "logs",
		},
		"not empty, no marker": {
			setup: func(t *testing.T, dir string) {
				mustDo(t, os.Mkdir(dir, 0o700))
				mustDo(t, os.WriteFile(filepath.Join(dir, "thesis.tex"), nil, 0o600))
			},
			wantErr: "not empty and not created by cdplane sim",
			keep:    "thesis.tex",
		},
		"a symbolic link to an empty directory": {
			setup: func(t *testing.T, dir string) {
				mustDo(t, os.Symlink(t.TempDir(), dir))
			},
			wantErr: "it is a symbolic link",
		},
		"another user's empty directory": {
			root: true,
			setup: func(t *testing.T, dir string) {
				mustDo(t, os.Mkdir(dir, 0o777))
				mustDo(t, os.Chmod(dir, 0o777))
				mustDo(t, os.Chown(dir, otherUID, otherUID))
			},
			wantErr: "owned by uid 4242",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.root {
				requireRoot(t)
			}
			dir := filepath.Join(t.TempDir(), "state")
			tc.setup(t, dir)
			before, _ := os.Lstat(dir)
			err := prepareStateDir(dir)
			if tc.keep != "" {
				if _, statErr := os.Stat(filepath.Join(dir, tc.keep)); statErr != nil {
					t.Errorf("%s is gone: %v", tc.keep, statErr)
				}
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), dir) {
					t.Fatalf("error %v, want one naming %s and saying %q", err, dir, tc.wantErr)
				}
				if after, _ := os.Lstat(dir); after.Mode() != before.Mode() {
					t.Errorf("mode changed from %v to %v", before.Mode(), after.Mode())
				}
				if _, err := os.Lstat(filepath.Join(dir, markerFile)); err == nil {
					t.Error("marked anyway")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := checkStateDir(dir, "use"); err != nil {
				t.Errorf("prepared, then: %v", err)
			}
		})
	}
}

// sleeper starts a detached `sleep` whose process the test stops at its end.
func sleeper(t *testing.T) controlplane.Process {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatalf("no sleep binary on PATH (coreutils): %v", err)
	}
	p, err := controlplane.StartDetached("sleeper", sleep, filepath.Join(t.TempDir(), "sleeper.log"), "300")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = controlplane.Stop([]controlplane.Process{p}, 5*time.Second) })
	return p
}

// A state.json that parses is not enough: `sim up`, `sim down` and Load refuse a directory the
// sim did not create, signal none of the processes its state lists and remove nothing.
func TestForeignStateIsRefused(t *testing.T) {
	p := sleeper(t)
	// Short enough for the nodes' sockets, which Up checks first.
	tmp, err := os.MkdirTemp("", "cds")
	mustDo(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	dir := filepath.Join(tmp, "s")
	mustDo(t, os.Mkdir(dir, 0o755))
	mustDo(t, os.Chmod(dir, 0o755))
	st := &State{Processes: []controlplane.Process{p}}
	mustDo(t, st.save(dir))

	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "refusing to use "+dir) {
		t.Errorf("Load: %v, want a refusal", err)
	}
	if err := Down(st, dir, io.Discard); err == nil || !strings.Contains(err.Error(), "refusing to remove "+dir+": not created by cdplane sim") {
		t.Errorf("Down: %v, want a refusal", err)
	}
	_, err = Up(t.Context(), Options{Topology: Topology{Nodes: 1, RackSize: 1, GPUsPerNode: 1}, StateDir: dir, Out: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "refusing to use "+dir) {
		t.Errorf("Up: %v, want a refusal", err)
	}
	if !controlplane.Alive(p) {
		t.Error("the process the foreign state lists was stopped")
	}
	if _, err := os.Stat(filepath.Join(dir, stateFile)); err != nil {
		t.Errorf("the foreign state is gone: %v", err)
	}
}

// The normal case: Down stops what a sim's state records and removes the directory.
func TestDownStopsAndRemovesItsOwn(t *testing.T) {
	p := sleeper(t)
	dir := simDir(t)
	mustDo(t, (&State{Processes: []controlplane.Process{p}}).save(dir))
	st, err := Load(dir)
	if err != nil || st == nil {
		t.Fatalf("Load: %v, %v", st, err)
	}
	if err := Down(st, dir, io.Discard); err != nil {
		t.Fatal(err)
	}
	if controlplane.Alive(p) {
		t.Error("the recorded process runs after Down")
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the state directory remains: %v", err)
	}
}

// A recorded PID that now belongs to another process (here: the recorded start time differs)
// is reported, not signalled, and the rest of Down goes on.
func TestDownLeavesAReusedPIDAlone(t *testing.T) {
	p := sleeper(t)
	dir := simDir(t)
	stale := p
	stale.StartTime++
	var out strings.Builder
	if err := Down(&State{Processes: []controlplane.Process{stale}}, dir, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "the PID now belongs to another process") {
		t.Errorf("Down said %q, nothing about the reused PID", out.String())
	}
	if !controlplane.Alive(p) {
		t.Error("the process now holding the recorded PID was stopped")
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the state directory remains: %v", err)
	}
}
