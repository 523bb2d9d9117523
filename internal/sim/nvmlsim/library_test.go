//go:build cgo

package nvmlsim

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"cdplane/internal/nvml"
	_ "cdplane/internal/nvml/nvmlreal" // the real backend, which the tests point at the library
)

// The library is built once, into testDir: a process loads a shared library once, and once its
// symbols are bound it calls the first copy it loaded whatever path it opens later, so every
// test goes through the one library, changing the node's spec between discoveries (the library
// reads it at every init).
var testDir, testLibrary string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		var err error
		if testDir, err = os.MkdirTemp("", "nvmlsim-test-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = os.RemoveAll(testDir) }()
		testLibrary = filepath.Join(testDir, LibrarySoname)
		if err := BuildLibrary(context.Background(), testLibrary, "-Werror"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		libraryCheck = checkLibrary
		return m.Run()
	}())
}

// onNode makes a fresh node directory the one the library answers as (NodeDirEnv), for the
// test, and returns the path of its spec.
func onNode(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp(testDir, "node-")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(NodeDirEnv, dir)
	return filepath.Join(dir, ConfPath)
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeConf(t testing.TB, path string, s Node) {
	t.Helper()
	data, err := RenderConf(s)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, data)
}

// discoverReal discovers through the real backend (nvmlreal, go-nvml) loading the library by
// its full path, and returns what the library wrote on stderr meanwhile.
func discoverReal(t testing.TB, d nvml.Discoverer) (nvml.Result, string, error) {
	t.Helper()
	if d == nil {
		var err error
		if d, err = nvml.New(testLibrary); err != nil {
			t.Fatal(err)
		}
	}
	var res nvml.Result
	var err error
	stderr := captureStderr(t, func() { res, err = d.Discover(context.Background()) })
	return res, stderr, err
}

// captureStderr returns what is written on file descriptor 2 while f runs.
func captureStderr(t testing.TB, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	read := make(chan struct{})
	go func() {
		_, _ = io.Copy(&out, r)
		close(read)
	}()
	if err := syscall.Dup3(int(w.Fd()), 2, 0); err != nil {
		t.Fatal(err)
	}
	f()
	if err := syscall.Dup3(saved, 2, 0); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Close(saved)
	_ = w.Close()
	<-read
	_ = r.Close()
	return out.String()
}

var errorClasses = []error{nvml.ErrFabricNotReady, nvml.ErrFabricFailed, nvml.ErrNVMLUnavailable}

// The real NVML code, reading the library, finds what the Go stand-in finds, spec by spec: the
// same GPUs, clique and error, or the same class of error where the stand-in's words differ.
func TestLibraryAgreesWithStandIn(t *testing.T) {
	rack := Rack(0, "node-a")
	with := func(mutate func(*Node)) Node {
		s := Rack(0, "node-a")
		mutate(&s)
		return s
	}
	cases := map[string]struct {
		spec       Node
		wantIs     error  // the error's class; nil: none
		wantClique string // when wantIs is nil
	}{
		"completed rack":      {spec: rack, wantClique: rack0ClusterUUID + ".1"},
		"another rack":        {spec: Rack(7, "node-z"), wantClique: rack7ClusterUUID + ".1"},
		"an older driver":     {spec: with(func(s *Node) { s.DriverVersion = "565.57.01" }), wantClique: rack0ClusterUUID + ".1"},
		"NOT_STARTED":         {spec: with(func(s *Node) { s.Fabric.State = nvml.FabricStateNotStarted }), wantIs: nvml.ErrFabricNotReady},
		"IN_PROGRESS":         {spec: with(func(s *Node) { s.Fabric.State = nvml.FabricStateInProgress }), wantIs: nvml.ErrFabricNotReady},
		"one GPU registering": {spec: with(func(s *Node) { f := s.Fabric; f.State = nvml.FabricStateInProgress; s.PerGPU = map[int]Fabric{2: f} }), wantIs: nvml.ErrFabricNotReady},
		"completed, failed":   {spec: with(func(s *Node) { s.Fabric.Status = 15 }), wantIs: nvml.ErrFabricFailed},
		"unknown state":       {spec: with(func(s *Node) { s.Fabric.State = 9 }), wantIs: nvml.ErrFabricFailed},
		"no fabric":           {spec: Node{Node: "cpu-node", GPUs: 2, Fabric: Fabric{NoFabric: true}}},
		"zero cluster UUID":   {spec: Node{Node: "n", GPUs: 2, Fabric: Fabric{State: nvml.FabricStateCompleted, CliqueID: 3}}},
		"GPUs disagree":       {spec: with(func(s *Node) { f := s.Fabric; f.ClusterUUID = rack1ClusterUUID; s.PerGPU = map[int]Fabric{3: f} }), wantIs: nvml.ErrFabricFailed},
		"one GPU without":     {spec: with(func(s *Node) { s.PerGPU = map[int]Fabric{1: {NoFabric: true}} }), wantClique: rack0ClusterUUID + ".1"},
		"unavailable":         {spec: with(func(s *Node) { s.Unavailable = true }), wantIs: nvml.ErrNVMLUnavailable},
		"0 GPUs":              {spec: Node{Node: "n"}},
		"every GPU":           {spec: func() Node { s := Rack(3, "big"); s.GPUs = MaxGPUs; return s }(), wantClique: RackCliqueID(3)},
	}
	path := onNode(t)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			writeConf(t, path, tc.spec)
			want, wantErr := tc.spec.Discover(context.Background())
			got, stderr, err := discoverReal(t, nil)
			if diff := cmp.Diff(want.GPUs, got.GPUs, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("GPUs (-stand-in +library):\n%s", diff)
			}
			if got.CliqueID != want.CliqueID || (tc.wantIs == nil && got.CliqueID != tc.wantClique) {
				t.Errorf("clique %q, the stand-in's %q, want %q", got.CliqueID, want.CliqueID, tc.wantClique)
			}
			for _, class := range errorClasses {
				if errors.Is(err, class) != errors.Is(wantErr, class) || errors.Is(err, class) != errors.Is(class, tc.wantIs) {
					t.Errorf("error %v, the stand-in's %v; want class %v", err, wantErr, tc.wantIs)
				}
			}
			if (err == nil) != (wantErr == nil) {
				t.Errorf("error %v, the stand-in's %v", err, wantErr)
			}
			if err != nil && wantErr != nil && !errors.Is(tc.wantIs, nvml.ErrNVMLUnavailable) && err.Error() != wantErr.Error() {
				t.Errorf("error %q, the stand-in's %q", err, wantErr)
			}
			if errors.Is(tc.wantIs, nvml.ErrNVMLUnavailable) && !errors.Is(err, gonvml.ERROR_DRIVER_NOT_LOADED) {
				t.Errorf("error %v, want NVML's ERROR_DRIVER_NOT_LOADED", err)
			}
			if stderr != "" {
				t.Errorf("the library wrote on stderr: %q", stderr)
			}
		})
	}
}

// A running discoverer sees the spec change, as a plugin sees a GPU's fabric registration
// change under it.
func TestLibraryFollowsTheSpec(t *testing.T) {
	path := onNode(t)
	d, err := nvml.New(testLibrary)
	if err != nil {
		t.Fatal(err)
	}
	spec := Rack(0, "node-a")
	spec.Fabric.State = nvml.FabricStateInProgress
	writeConf(t, path, spec)
	if _, _, err := discoverReal(t, d); !errors.Is(err, nvml.ErrFabricNotReady) {
		t.Fatalf("while registering: %v, want ErrFabricNotReady", err)
	}
	spec.Fabric.State = nvml.FabricStateCompleted
	writeConf(t, path, spec)
	if res, _, err := discoverReal(t, d); err != nil || res.CliqueID != RackCliqueID(0) {
		t.Fatalf("once registered: %q, %v; want the rack's clique", res.CliqueID, err)
	}
	writeFile(t, path, []byte("nvml-sim 1\n"))
	if _, _, err := discoverReal(t, d); !errors.Is(err, gonvml.ERROR_UNKNOWN) {
		t.Fatalf("with a malformed spec: %v, want ERROR_UNKNOWN", err)
	}
	writeConf(t, path, spec)
	if res, _, err := discoverReal(t, d); err != nil || res.CliqueID != RackCliqueID(0) {
		t.Fatalf("once the spec is good again: %q, %v; want the rack's clique", res.CliqueID, err)
	}
}

// Where there is no simulated driver, NVML does not initialise, as on a machine without the
// NVIDIA driver; a malformed spec fails init with ERROR_UNKNOWN and names the line at fault.
func TestLibraryWithoutASpec(t *testing.T) {
	t.Run("malformed", func(t *testing.T) {
		path := onNode(t)
		writeFile(t, path, []byte("nvml-sim 1\ndriver 580.82.07\ngpus 1\ngpu 0 GPU-nope nofabric\n"))
		_, stderr, err := discoverReal(t, nil)
		if !errors.Is(err, nvml.ErrNVMLUnavailable) || !errors.Is(err, gonvml.ERROR_UNKNOWN) {
			t.Errorf("error %v, want ErrNVMLUnavailable and ERROR_UNKNOWN", err)
		}
		if want := "nvml-sim: " + path + ":4: GPU 0: UUID GPU-nope is not"; !strings.HasPrefix(stderr, want) {
			t.Errorf("stderr %q, want it to start with %q", stderr, want)
		}
	})
	t.Run("no spec file", func(t *testing.T) {
		path := onNode(t)
		_, stderr, err := discoverReal(t, nil)
		if !errors.Is(err, nvml.ErrNVMLUnavailable) || !errors.Is(err, gonvml.ERROR_DRIVER_NOT_LOADED) {
			t.Errorf("error %v, want ErrNVMLUnavailable and ERROR_DRIVER_NOT_LOADED", err)
		}
		if !strings.Contains(stderr, path) {
			t.Errorf("stderr %q does not name %s", stderr, path)
		}
	})
	t.Run("not on a node", func(t *testing.T) {
		t.Setenv(NodeDirEnv, "")
		_ = os.Unsetenv(NodeDirEnv)
		_, stderr, err := discoverReal(t, nil)
		if !errors.Is(err, nvml.ErrNVMLUnavailable) || !errors.Is(err, gonvml.ERROR_DRIVER_NOT_LOADED) {
			t.Errorf("error %v, want ErrNVMLUnavailable and ERROR_DRIVER_NOT_LOADED", err)
		}
		if !strings.Contains(stderr, NodeDirEnv+" is not set") {
			t.Errorf("stderr %q does not say that %s is not set", stderr, NodeDirEnv)
		}
	})
}

// The library exports NVML's entry points and nothing else, under NVML's soname.
func TestLibrarySymbols(t *testing.T) {
	f, err := elf.Open(testLibrary)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_BIND(s.Info) == elf.STB_GLOBAL && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			got = append(got, s.Name)
		}
	}
	slices.Sort(got)
	want := []string{
		"nvmlDeviceGetCount", "nvmlDeviceGetCount_v2", "nvmlDeviceGetGpuFabricInfo", "nvmlDeviceGetGpuFabricInfoV",
		"nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetName", "nvmlDeviceGetUUID",
		"nvmlErrorString", "nvmlInit", "nvmlInitWithFlags", "nvmlInit_v2", "nvmlShutdown",
		"nvmlSystemGetDriverVersion", "nvmlSystemGetNVMLVersion",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("exported functions (-want +got):\n%s", diff)
	}
	soname, err := f.DynString(elf.DT_SONAME)
	if err != nil || !slices.Equal(soname, []string{LibrarySoname}) {
		t.Errorf("soname %q (%v), want %s", soname, err, LibrarySoname)
	}
}

// The library answers through NVML's C ABI as NVML does: return codes for calls out of order,
// bad arguments, short buffers and struct versions it does not know (a C program makes the
// calls go-nvml cannot), and the node's readings in every fabric struct version.
func TestLibraryABI(t *testing.T) {
	cc, ccArgs := compiler()
	bin := filepath.Join(t.TempDir(), "abi_check")
	args := slices.Concat(ccArgs, []string{"-std=c11", "-Wall", "-Wextra", "-Werror", "-o", bin, filepath.Join("testdata", "abi_check.c"),
		testLibrary, "-Wl,-rpath," + filepath.Dir(testLibrary)})
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("building the ABI check: %v\n%s", err, out)
	}
	path := onNode(t)
	spec := Rack(0, "node-a")
	spec.GPUs = 2
	spec.Fabric.Status = 15 // a failed registration: the status must come through
	spec.PerGPU = map[int]Fabric{1: {NoFabric: true}}
	writeConf(t, path, spec)
	out, err := exec.Command(bin).CombinedOutput() // on the node: onNode set NodeDirEnv
	if err != nil {
		t.Errorf("the ABI check failed: %v", err)
	}
	u, _ := nvml.ParseUUID(rack0ClusterUUID)
	fabric := fmt.Sprintf("3 15 %x 1", u)
	want := strings.Join([]string{
		"nvml 13." + DefaultDriverVersion,
		"driver " + DefaultDriverVersion,
		"count 2",
		"uuid0 " + nodeAGPU0UUID,
		"name NVIDIA GB200",
		"v1 " + fabric,
		"v2 " + fabric,
		"v2 version 0x2000024 health 0",
		"v3 " + fabric,
		"v3 version 0x3000028 health 0 0",
		"driver-not-loaded NVIDIA driver not loaded",
	}, "\n") + "\n"
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Errorf("the ABI check's output (-want +got):\n%s", diff)
	}
}

// go-nvml's own calls beyond the real backend's: what a tool on the node (cdplane-nvml, a
// future plugin check) would read.
func TestLibraryThroughGoNVML(t *testing.T) {
	path := onNode(t)
	spec := Rack(0, "node-a")
	spec.DriverVersion = "570.133.20"
	writeConf(t, path, spec)
	lib := gonvml.New(gonvml.WithLibraryPath(testLibrary))
	if ret := lib.Init(); ret != gonvml.SUCCESS {
		t.Fatalf("Init: %v", ret)
	}
	defer func() {
		if ret := lib.Shutdown(); ret != gonvml.SUCCESS {
			t.Errorf("Shutdown: %v", ret)
		}
	}()
	if v, ret := lib.SystemGetDriverVersion(); ret != gonvml.SUCCESS || v != "570.133.20" {
		t.Errorf("driver version %q, %v", v, ret)
	}
	if v, ret := lib.SystemGetNVMLVersion(); ret != gonvml.SUCCESS || v != "12.570.133.20" {
		t.Errorf("NVML version %q, %v", v, ret)
	}
	dev, ret := lib.DeviceGetHandleByIndex(3)
	if ret != gonvml.SUCCESS {
		t.Fatalf("GPU 3: %v", ret)
	}
	if name, ret := dev.GetName(); ret != gonvml.SUCCESS || name != "NVIDIA GB200" {
		t.Errorf("name %q, %v", name, ret)
	}
	info, ret := dev.GetGpuFabricInfoV().V3()
	u, _ := nvml.ParseUUID(rack0ClusterUUID)
	if ret != gonvml.SUCCESS || info.ClusterUuid != u || info.CliqueId != 1 || info.State != uint8(nvml.FabricStateCompleted) {
		t.Errorf("fabric info v3 %+v, %v", info, ret)
	}
	if _, ret := lib.DeviceGetHandleByIndex(4); ret != gonvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GPU 4 of 4: %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	if s := gonvml.ERROR_ARGUMENT_VERSION_MISMATCH.Error(); s != "struct version not supported" {
		t.Errorf("go-nvml's error string while the library is loaded: %q, want the library's", s)
	}
}

var fuzzNode = sync.OnceValues(func() (string, error) {
	return os.MkdirTemp(testDir, "fuzz-node-")
})

// checkLibrary is libraryCheck: the library, given data as the node's spec, agrees with
// parseConf's verdict c, err.
func checkLibrary(t *testing.T, data []byte, c conf, err error) {
	dir, dirErr := fuzzNode()
	if dirErr != nil {
		t.Fatal(dirErr)
	}
	t.Setenv(NodeDirEnv, dir)
	path := filepath.Join(dir, ConfPath)
	writeFile(t, path, data)
	res, stderr, gotErr := discoverReal(t, nil)
	var ce *confError
	switch {
	case errors.As(err, &ce):
		if !errors.Is(gotErr, nvml.ErrNVMLUnavailable) || !errors.Is(gotErr, gonvml.ERROR_UNKNOWN) {
			t.Fatalf("the twin refuses %q (%v); the library: %+v, %v", data, err, res, gotErr)
		}
		if want := fmt.Sprintf("nvml-sim: %s:%d: ", path, ce.Line); !strings.HasPrefix(stderr, want) {
			t.Fatalf("the twin refuses %q at line %d (%v); the library says %q", data, ce.Line, err, stderr)
		}
	case err != nil:
		t.Fatal(err)
	case c.Unavailable:
		if !errors.Is(gotErr, gonvml.ERROR_DRIVER_NOT_LOADED) {
			t.Fatalf("an unavailable node: %+v, %v; want ERROR_DRIVER_NOT_LOADED", res, gotErr)
		}
	default:
		if gotErr != nil && !errors.Is(gotErr, nvml.ErrFabricNotReady) && !errors.Is(gotErr, nvml.ErrFabricFailed) {
			t.Fatalf("the twin reads %q; the library: %v (stderr %q)", data, gotErr, stderr)
		}
		if diff := cmp.Diff(c.GPUs, res.GPUs, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("GPUs of %q (-twin +library):\n%s", data, diff)
		}
		wantClique, wantErr := nvml.DeriveCliqueID(c.GPUs)
		if res.CliqueID != wantClique || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("clique of %q: %q, %v; want %q, %v", data, res.CliqueID, gotErr, wantClique, wantErr)
		}
	}
}
