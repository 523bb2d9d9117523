package imexsim

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cdplane/internal/imex"
)

// containerFixture is a node directory with what a containerized IMEX needs, and the
// container's view of it.
type containerFixture struct {
	nodeDir string
	// paths is the container's view (ContainerPathsEnv); nil: the IMEX is not in a container.
	paths map[string]string
	// libraryPath is LibraryPathEnv's value; empty: not set.
	libraryPath string
}

// The node's files of a containerFixture, below its directory.
const (
	fixtureLibDir = "usr/lib/aarch64-linux-gnu"
	fixtureLib    = fixtureLibDir + "/libnvidia-ml.so.580.82.07"
)

// newContainerFixture lays out a node as the simulator does (the capability file naming minor
// 1, /dev/nvidiactl and nvidia-cap1 as empty files, the driver's NVML library and its soname
// link) and a view that has the two devices and the library where the kubelet plugin mounts it.
func newContainerFixture(t *testing.T) *containerFixture {
	t.Helper()
	dir := t.TempDir()
	f := &containerFixture{nodeDir: dir}
	f.writeNodeFile(t, IMEXMgmtCapabilityPath, "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n")
	f.writeNodeFile(t, CtlDevicePath, "")
	f.writeNodeFile(t, IMEXMgmtDeviceDir+"/nvidia-cap1", "")
	f.writeNodeFile(t, fixtureLib, "")
	if err := os.Symlink(filepath.Base(fixtureLib), filepath.Join(dir, fixtureLibDir, NVMLLibrary)); err != nil {
		t.Fatal(err)
	}
	f.paths = map[string]string{
		CtlDevicePath:                          filepath.Join(dir, CtlDevicePath),
		IMEXMgmtDeviceDir + "/nvidia-cap1":     filepath.Join(dir, IMEXMgmtDeviceDir, "nvidia-cap1"),
		"/usr/local/nvidia/lib/" + NVMLLibrary: filepath.Join(dir, fixtureLibDir, NVMLLibrary),
	}
	return f
}

func (f *containerFixture) writeNodeFile(t *testing.T, p, content string) {
	t.Helper()
	path := filepath.Join(f.nodeDir, p)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *containerFixture) removeNodeFile(t *testing.T, p string) {
	t.Helper()
	if err := os.Remove(filepath.Join(f.nodeDir, p)); err != nil {
		t.Fatal(err)
	}
}

// env is the stand-ins of the fixture's container, as the simulated kubelet sets them.
func (f *containerFixture) env() []string {
	env := []string{NodeDirEnv + "=" + f.nodeDir}
	if f.paths != nil {
		env = append(env, ContainerPathsEnv+"="+EncodeContainerPaths(f.paths))
	}
	// Always set, so that the test process's own never counts.
	return append(env, LibraryPathEnv+"="+f.libraryPath)
}

// sessionTaken reports whether a run ever went as far as taking the node's IMEX session: the
// lock file exists.
func (f *containerFixture) sessionTaken(t *testing.T) bool {
	t.Helper()
	_, err := os.Stat(filepath.Join(f.nodeDir, SessionLockPath))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// The view's encoding: a JSON object of absolute paths that decodes to what was encoded; what
// is not one is refused.
func TestContainerPathsEncoding(t *testing.T) {
	paths := map[string]string{"/dev/nvidiactl": "/s/nodes/a/dev/nvidiactl", "/etc/hosts": "/s/p/etc-hosts"}
	enc := EncodeContainerPaths(paths)
	if want := `{"/dev/nvidiactl":"/s/nodes/a/dev/nvidiactl","/etc/hosts":"/s/p/etc-hosts"}`; enc != want {
		t.Errorf("encoded %s, want %s", enc, want)
	}
	got, err := DecodeContainerPaths(enc)
	if err != nil || !maps.Equal(got, paths) {
		t.Errorf("decoded %v (err %v), want %v", got, err, paths)
	}
	for _, bad := range []string{"", "/dev/nvidiactl", `["/dev/nvidiactl"]`, `{"dev/nvidiactl":"/x"}`, `{"/dev/nvidiactl":"x"}`} {
		if _, err := DecodeContainerPaths(bad); err == nil {
			t.Errorf("DecodeContainerPaths(%q) passed", bad)
		}
		if _, err := standInsFrom(envLookup([]string{ContainerPathsEnv + "=" + bad})); err == nil || !strings.Contains(err.Error(), ContainerPathsEnv) {
			t.Errorf("stand-ins with %s=%q: %v, want an error naming the variable", ContainerPathsEnv, bad, err)
		}
	}
}

// A container path resolves through the longest key that covers it; a path already below a
// host path of the view is itself; anything else is not in the container.
func TestContainerViewHostPath(t *testing.T) {
	view, err := decodeView(EncodeContainerPaths(map[string]string{
		"/usr/local/nvidia":       "/n/driver",
		"/usr/local/nvidia/lib/x": "/n/other/x",
		"/dev/nvidiactl":          "/n/dev/nvidiactl",
	}))
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{
		"/usr/local/nvidia":               "/n/driver",
		"/usr/local/nvidia/lib/y":         "/n/driver/lib/y",
		"/usr/local/nvidia/lib/x":         "/n/other/x",
		"/usr/local/nvidia/lib/x/z":       "/n/other/x/z",
		"/usr/local/nvidia/../nvidia/bin": "/n/driver/bin",
		"/dev/nvidiactl":                  "/n/dev/nvidiactl",
		"/n/driver/lib":                   "/n/driver/lib", // already a host path
		"/dev/nvidiactl2":                 "",
		"/usr/local/nvidiax":              "",
		"/etc/hosts":                      "",
		"relative/path":                   "",
	} {
		got, ok := view.hostPath(p)
		if got != want || ok != (want != "") {
			t.Errorf("hostPath(%s) = %q, %v; want %q", p, got, ok, want)
		}
	}
	root, err := decodeView(`{"/":"/n/root"}`)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := root.hostPath("/dev/nvidiactl"); !ok || got != "/n/root/dev/nvidiactl" {
		t.Errorf("through /: %q, %v", got, ok)
	}
}

// A containerized IMEX refuses to start without /dev/nvidiactl, the IMEX management device or
// libnvidia-ml.so.1 in its container, each in the real program's or the loader's words, before
// it takes the node's session; with all of them it starts, and outside a container nothing is
// checked.
func TestSimStrictContainer(t *testing.T) {
	t.Parallel()
	const (
		ctlMsg    = "failed to open /dev/nvidiactl: No such file or directory"
		mgmtMsg   = "failed to open the IMEX management device /dev/nvidia-caps/nvidia-cap1: No such file or directory"
		loaderMsg = "error while loading shared libraries: libnvidia-ml.so.1: cannot open shared object file: No such file or directory"
	)
	type want struct {
		missing string // MissingError.Path; "" for another error
		loader  bool
		msg     string // the error's message ends with it; "" for a start
	}
	for name, tc := range map[string]struct {
		edit func(t *testing.T, f *containerFixture)
		want want
	}{
		"everything there": {},
		"not in a container: nothing checked": {edit: func(t *testing.T, f *containerFixture) {
			f.paths = nil
			f.removeNodeFile(t, CtlDevicePath)
			f.removeNodeFile(t, IMEXMgmtCapabilityPath)
		}},
		"no /dev/nvidiactl": {
			edit: func(_ *testing.T, f *containerFixture) { delete(f.paths, CtlDevicePath) },
			want: want{missing: CtlDevicePath, msg: ctlMsg},
		},
		"/dev/nvidiactl without its host file": {
			edit: func(t *testing.T, f *containerFixture) { f.removeNodeFile(t, CtlDevicePath) },
			want: want{missing: CtlDevicePath, msg: ctlMsg},
		},
		"no IMEX management device": {
			edit: func(_ *testing.T, f *containerFixture) { delete(f.paths, IMEXMgmtDeviceDir+"/nvidia-cap1") },
			want: want{missing: "/dev/nvidia-caps/nvidia-cap1", msg: mgmtMsg},
		},
		"the management device of another minor": {
			edit: func(t *testing.T, f *containerFixture) {
				f.writeNodeFile(t, IMEXMgmtCapabilityPath, "DeviceFileMinor: 7\nDeviceFileMode: 256\n")
			},
			want: want{missing: "/dev/nvidia-caps/nvidia-cap7",
				msg: "failed to open the IMEX management device /dev/nvidia-caps/nvidia-cap7: No such file or directory"},
		},
		"no capability file on the node": {
			edit: func(t *testing.T, f *containerFixture) { f.removeNodeFile(t, IMEXMgmtCapabilityPath) },
			want: want{msg: "failed to read the IMEX management capability " + IMEXMgmtCapabilityPath + ": No such file or directory"},
		},
		"no libnvidia-ml.so.1": {
			edit: func(_ *testing.T, f *containerFixture) { delete(f.paths, "/usr/local/nvidia/lib/"+NVMLLibrary) },
			want: want{missing: NVMLLibrary, loader: true, msg: loaderMsg},
		},
		"libnvidia-ml.so.1 a dangling link": {
			edit: func(t *testing.T, f *containerFixture) { f.removeNodeFile(t, fixtureLib) },
			want: want{missing: NVMLLibrary, loader: true, msg: loaderMsg},
		},
		"the loader fails first": {
			edit: func(_ *testing.T, f *containerFixture) { f.paths = map[string]string{} },
			want: want{missing: NVMLLibrary, loader: true, msg: loaderMsg},
		},
		"the library in an LD_LIBRARY_PATH directory": {edit: func(_ *testing.T, f *containerFixture) {
			delete(f.paths, "/usr/local/nvidia/lib/"+NVMLLibrary)
			f.paths["/opt/driver"] = filepath.Join(f.nodeDir, fixtureLibDir)
			f.libraryPath = "relative:/opt/nothing::/opt/driver"
		}},
		"LD_LIBRARY_PATH remapped by the kubelet": {edit: func(_ *testing.T, f *containerFixture) {
			delete(f.paths, "/usr/local/nvidia/lib/"+NVMLLibrary)
			f.paths["/opt/driver"] = filepath.Join(f.nodeDir, fixtureLibDir)
			f.libraryPath = filepath.Join(f.nodeDir, fixtureLibDir)
		}},
		"a standard directory mounted whole": {edit: func(_ *testing.T, f *containerFixture) {
			delete(f.paths, "/usr/local/nvidia/lib/"+NVMLLibrary)
			f.paths["/usr/lib/aarch64-linux-gnu"] = filepath.Join(f.nodeDir, fixtureLibDir)
		}},
		"a library directory outside the container": {
			edit: func(_ *testing.T, f *containerFixture) {
				delete(f.paths, "/usr/local/nvidia/lib/"+NVMLLibrary)
				f.libraryPath = filepath.Join(f.nodeDir, fixtureLibDir)
			},
			want: want{missing: NVMLLibrary, loader: true, msg: loaderMsg},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			n := newTestNodes(t, false, "127.0.0.101")[0]
			n.write(t, peersOf(n))
			f := newContainerFixture(t)
			if tc.edit != nil {
				tc.edit(t, f)
			}
			n.env = append(append(n.env, f.env()...), ShutdownDelayEnv+"=0")
			sim := New(n.options(t))
			exited, err := sim.Start(withTimeout(t))
			if tc.want.msg == "" {
				if err != nil {
					t.Fatalf("Start: %v", err)
				}
				readyWithin(t, n.ip, sim)
				if err := sim.Stop(withTimeout(t)); err != nil {
					t.Errorf("Stop: %v", err)
				}
				if err := receive(t, "the run to end", exited); err != nil {
					t.Errorf("the run ended with %v", err)
				}
				return
			}
			if err == nil {
				_ = sim.Stop(context.Background())
				t.Fatalf("Start passed; want %q", tc.want.msg)
			}
			if !strings.HasSuffix(err.Error(), tc.want.msg) {
				t.Errorf("Start: %v; want it to end with %q", err, tc.want.msg)
			}
			var missing *MissingError
			switch {
			case tc.want.missing == "" && errors.As(err, &missing):
				t.Errorf("Start: %v is a MissingError", err)
			case tc.want.missing != "" && !errors.As(err, &missing):
				t.Errorf("Start: %v is not a MissingError", err)
			case tc.want.missing != "" && (missing.Path != tc.want.missing || missing.Loader != tc.want.loader):
				t.Errorf("missing %s (loader %v), want %s (loader %v)", missing.Path, missing.Loader, tc.want.missing, tc.want.loader)
			}
			if f.sessionTaken(t) {
				t.Error("the run took the node's IMEX session")
			}
		})
	}
}

// As a process, a containerized IMEX that misses its library exits as the loader makes it
// (status 127, the loader's message), and one that misses a device exits with status 1 naming
// it.
func TestSimProcessStrictContainer(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		drop string
		code int
		msg  string
	}{
		"no library": {drop: "/usr/local/nvidia/lib/" + NVMLLibrary, code: LoaderExitCode,
			msg: ": error while loading shared libraries: libnvidia-ml.so.1: cannot open shared object file: No such file or directory"},
		"no /dev/nvidiactl": {drop: CtlDevicePath, code: 1, msg: "imex-sim: failed to open /dev/nvidiactl: No such file or directory"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			n := newTestNodes(t, false, "127.0.0.102")[0]
			n.write(t, peersOf(n))
			f := newContainerFixture(t)
			delete(f.paths, tc.drop)
			n.env = append(n.env, f.env()...)
			exited := startProcess(t, simProcess(t, n))
			err := receive(t, "the process to exit", exited)
			var exitErr *imex.ExitError
			if !errors.As(err, &exitErr) || exitErr.Code != tc.code || !strings.Contains(exitErr.Stderr, tc.msg) {
				t.Fatalf("process ended with %v; want exit status %d and %q", err, tc.code, tc.msg)
			}
			if f.sessionTaken(t) {
				t.Error("the process took the node's IMEX session")
			}
		})
	}
}

// After a clean stop of a containerized IMEX the node's session stays held for the shutdown
// delay (DefaultShutdownDelay unless ShutdownDelayEnv says otherwise), while the driver releases
// the run's memory exports: the run itself ends at once, an IMEX started on the node meanwhile
// fails with NV_ERR_IN_USE, and once the delay is over the next IMEX takes the session.
func TestSimShutdownDelayHoldsTheSession(t *testing.T) {
	t.Parallel()
	nodes := newTestNodes(t, false, "127.0.0.103", "127.0.0.104")
	first, second := nodes[0], nodes[1]
	f := newContainerFixture(t)
	first.env = append(first.env, f.env()...)
	second.env = append(append(second.env, f.env()...), ShutdownDelayEnv+"=0")
	for _, n := range nodes {
		n.write(t, peersOf(n))
	}
	simFirst, exitedFirst := startSim(t, first)
	readyWithin(t, first.ip, simFirst)

	stopped := time.Now()
	if err := simFirst.Stop(withTimeout(t)); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := receive(t, "the first run to end", exitedFirst); err != nil {
		t.Fatalf("the first run ended with %v, want a clean stop", err)
	}
	if _, found := markerPeers(t, f.nodeDir); found {
		t.Error("a clean stop left the unsafe-termination marker")
	}
	releasing := filepath.Join(f.nodeDir, ReleasingPath)
	data, err := os.ReadFile(releasing)
	if err != nil {
		t.Fatalf("no record of the release in progress: %v", err)
	}
	until, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(data)))
	if err != nil || until.Before(stopped.Add(DefaultShutdownDelay)) {
		t.Errorf("released until %q (%v), want at least %s after the stop", data, err, DefaultShutdownDelay)
	}

	simSecond, exitedSecond := startSim(t, second)
	err = receive(t, "the second run on the node to end", exitedSecond)
	if !errors.Is(err, ErrSessionInUse) || !strings.Contains(err.Error(), "NV_ERR_IN_USE") {
		t.Fatalf("a run started during the shutdown delay ended with %v, want ErrSessionInUse naming NV_ERR_IN_USE", err)
	}

	// The driver is done: the next start takes the session.
	if err := os.WriteFile(releasing, []byte(time.Now().Add(-time.Second).Format(time.RFC3339Nano)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := simSecond.Start(withTimeout(t)); err != nil {
		t.Fatalf("Start after the delay: %v", err)
	}
	readyWithin(t, second.ip+" with the session", simSecond)
}

// With ShutdownDelayEnv=0, or outside a container, a stop does not wait: the next IMEX takes
// the session at once. A crash is never delayed.
func TestSimNoShutdownDelay(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		container bool
		env       []string
		crash     bool
	}{
		"0 in a container":    {container: true, env: []string{ShutdownDelayEnv + "=0"}},
		"outside a container": {},
		"a crash":             {container: true, env: []string{ShutdownDelayEnv + "=1h"}, crash: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			n := newTestNodes(t, false, "127.0.0.105")[0]
			n.write(t, peersOf(n))
			f := newContainerFixture(t)
			if !tc.container {
				f.paths = nil
			}
			n.env = append(append(n.env, f.env()...), tc.env...)
			sim, exited := startSim(t, n)
			readyWithin(t, n.ip, sim)
			if tc.crash {
				if err := Crash(withTimeout(t), n.settings.IMEXConfigPath); err != nil {
					t.Fatalf("Crash: %v", err)
				}
				if err := receive(t, "the crashed run to end", exited); !errors.Is(err, ErrCrashed) {
					t.Fatalf("crashed run ended with %v, want ErrCrashed", err)
				}
			} else {
				if err := sim.Stop(withTimeout(t)); err != nil {
					t.Fatalf("Stop: %v", err)
				}
				if err := receive(t, "the run to end", exited); err != nil {
					t.Fatalf("the run ended with %v, want a clean stop", err)
				}
			}
			sess, err := takeSession(f.nodeDir)
			if err != nil {
				t.Fatalf("taking the session after the run ended: %v", err)
			}
			sess.release()
		})
	}
}

// As a process, SIGTERM ends a containerized IMEX at once and leaves the node's session held
// while the driver releases its exports: a new IMEX meanwhile gets NV_ERR_IN_USE. A crash
// leaves nothing to release, and the node marked unsafe.
func TestSimProcessShutdownDelay(t *testing.T) {
	t.Parallel()
	n := newTestNodes(t, false, "127.0.0.107")[0]
	n.write(t, peersOf(n))
	f := newContainerFixture(t)
	n.env = append(append(n.env, f.env()...), ShutdownDelayEnv+"=1h")
	p := simProcess(t, n, func(o *imex.Options) { o.StopGrace = -1 })
	exited := startProcess(t, p)
	readyWithin(t, n.ip, p)
	if err := p.Stop(withTimeout(t)); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := receive(t, "the process to exit", exited); err != nil {
		t.Fatalf("the process ended with %v, want a clean stop", err)
	}
	if _, err := takeSession(f.nodeDir); !errors.Is(err, ErrSessionInUse) {
		t.Fatalf("taking the session while the driver releases the exports: %v, want ErrSessionInUse", err)
	}
	if _, found := markerPeers(t, f.nodeDir); found {
		t.Error("a clean stop left the unsafe-termination marker")
	}

	// A run that crashes leaves nothing to release: the session is free at once, the node
	// marked unsafe.
	if err := os.Remove(filepath.Join(f.nodeDir, ReleasingPath)); err != nil {
		t.Fatal(err)
	}
	p = simProcess(t, n, func(o *imex.Options) { o.StopGrace = -1 })
	exited = startProcess(t, p)
	readyWithin(t, n.ip, p)
	if err := Crash(withTimeout(t), n.settings.IMEXConfigPath); err != nil {
		t.Fatalf("Crash: %v", err)
	}
	var exitErr *imex.ExitError
	if err := receive(t, "the process to exit", exited); !errors.As(err, &exitErr) || exitErr.Code == 0 {
		t.Errorf("the process ended with %v, want a crash", err)
	}
	sess, err := takeSession(f.nodeDir)
	if err != nil {
		t.Fatalf("taking the session after the crash: %v", err)
	}
	sess.release()
	if _, found := markerPeers(t, f.nodeDir); !found {
		t.Error("a crash left no unsafe-termination marker")
	}
}
