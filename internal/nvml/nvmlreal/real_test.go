//go:build cgo

package nvmlreal

import (
	"context"
	"errors"
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"cdplane/internal/nvml"
)

// fakeLibrary stands in for go-nvml. Its zero value is a working library
// without GPUs that has both fabric info entry points.
type fakeLibrary struct {
	initRet    gonvml.Return
	countRet   gonvml.Return
	devices    []*fakeDevice
	handleRet  map[int]gonvml.Return
	missingSym map[string]bool

	inits, shutdowns int
	initFlags        uint32
}

// clusterA is a fabric cluster UUID, cliqueA7 the id of its clique 7.
var clusterA = [16]byte{0x4c, 0x9d, 0x5b, 0x2b, 0x11, 0x22, 0x43, 0x44, 0x85, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc}

var clusterB = [16]byte{0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}

const (
	cliqueA7 = "4c9d5b2b-1122-4344-8566-778899aabbcc.7"
	cliqueB7 = "deadbeef-0000-0000-0000-000000000001.7"
)

func (l *fakeLibrary) InitWithFlags(flags uint32) gonvml.Return {
	l.inits++
	l.initFlags = flags
	return l.initRet
}

func (l *fakeLibrary) Shutdown() gonvml.Return {
	l.shutdowns++
	return gonvml.SUCCESS
}

func (l *fakeLibrary) DeviceGetCount() (int, gonvml.Return) {
	return len(l.devices), l.countRet
}

func (l *fakeLibrary) DeviceGetHandleByIndex(i int) (nvmlDevice, gonvml.Return) {
	if ret, ok := l.handleRet[i]; ok {
		return nil, ret
	}
	return l.devices[i], gonvml.SUCCESS
}

func (l *fakeLibrary) LookupSymbol(name string) error {
	if l.missingSym[name] {
		return errors.New("undefined symbol: " + name)
	}
	return nil
}

// fakeDevice answers with a fixed fabric info through both entry points.
type fakeDevice struct {
	uuid    string
	uuidRet gonvml.Return
	// info is what both fabric entry points report, with ret (v1) and retV2.
	info          gonvml.GpuFabricInfo
	ret, retV2    gonvml.Return
	panicOnFabric bool

	v1Calls, v2Calls int
}

func (d *fakeDevice) GetUUID() (string, gonvml.Return) { return d.uuid, d.uuidRet }

func (d *fakeDevice) GetGpuFabricInfo() (gonvml.GpuFabricInfo, gonvml.Return) {
	d.v1Calls++
	if d.panicOnFabric {
		panic("symbol lookup failed")
	}
	return d.info, d.ret
}

func (d *fakeDevice) GetGpuFabricInfoV2() (gonvml.GpuFabricInfo_v2, gonvml.Return) {
	d.v2Calls++
	if d.panicOnFabric {
		panic("symbol lookup failed")
	}
	return gonvml.GpuFabricInfo_v2{
		ClusterUuid: d.info.ClusterUuid, Status: d.info.Status, CliqueId: d.info.CliqueId, State: d.info.State,
	}, d.retV2
}

func fabricDevice(uuid string, cluster [16]byte, clique uint32, state nvml.FabricState, status nvml.FabricStatus) *fakeDevice {
	return &fakeDevice{uuid: uuid, info: gonvml.GpuFabricInfo{
		ClusterUuid: cluster, CliqueId: clique, State: uint8(state), Status: uint32(status),
	}}
}

func rackDevices(n int) []*fakeDevice {
	devs := make([]*fakeDevice, n)
	for i := range devs {
		devs[i] = fabricDevice("GPU-"+string(rune('a'+i)), clusterA, 7, nvml.FabricStateCompleted, nvml.FabricStatusSuccess)
	}
	return devs
}

func TestNVMLDiscover(t *testing.T) {
	gpusA7 := func(n int) []nvml.GPU {
		gpus := make([]nvml.GPU, n)
		for i := range gpus {
			gpus[i] = gpu(i, completed(clusterA, 7))
		}
		return gpus
	}
	cases := map[string]struct {
		lib        *fakeLibrary
		want       nvml.Result
		wantErr    error // compared with cmp when wantErrIs is nil
		wantErrIs  []error
		wantErrMsg string // substring
		wantV1     int    // v1 fabric calls on device 0
		wantV2     int    // v2 fabric calls on device 0
	}{
		"four GPUs in one clique, read through the versioned call": {
			lib:    &fakeLibrary{devices: rackDevices(4)},
			want:   nvml.Result{Backend: nvml.BackendNVML, GPUs: gpusA7(4), CliqueID: cliqueA7},
			wantV2: 1,
		},
		"driver without the versioned call: first call used": {
			lib:    &fakeLibrary{devices: rackDevices(2), missingSym: map[string]bool{fabricInfoVSymbol: true}},
			want:   nvml.Result{Backend: nvml.BackendNVML, GPUs: gpusA7(2), CliqueID: cliqueA7},
			wantV1: 1,
		},
		"versioned call refuses the struct version: first call used": {
			lib: &fakeLibrary{devices: func() []*fakeDevice {
				d := rackDevices(1)
				d[0].retV2 = gonvml.ERROR_ARGUMENT_VERSION_MISMATCH
				return d
			}()},
			want:   nvml.Result{Backend: nvml.BackendNVML, GPUs: gpusA7(1), CliqueID: cliqueA7},
			wantV1: 1, wantV2: 1,
		},
		"driver without any fabric call: no fabric": {
			lib: &fakeLibrary{devices: rackDevices(2), missingSym: map[string]bool{fabricInfoVSymbol: true, fabricInfoV1Symbol: true}},
			want: nvml.Result{Backend: nvml.BackendNVML, GPUs: []nvml.GPU{
				{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"},
			}},
		},
		"fabric info ERROR_NOT_SUPPORTED: no fabric": {
			lib: &fakeLibrary{devices: []*fakeDevice{
				{uuid: "GPU-a", retV2: gonvml.ERROR_NOT_SUPPORTED},
				{uuid: "GPU-b", retV2: gonvml.ERROR_NOT_SUPPORTED},
			}},
			want: nvml.Result{Backend: nvml.BackendNVML, GPUs: []nvml.GPU{
				{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"},
			}},
			wantV2: 1,
		},
		"no GPUs: empty clique": {
			lib:  &fakeLibrary{},
			want: nvml.Result{Backend: nvml.BackendNVML, GPUs: []nvml.GPU{}},
		},
		"registration in progress: not ready, GPUs still reported": {
			lib: &fakeLibrary{devices: []*fakeDevice{
				fabricDevice("GPU-a", clusterA, 7, nvml.FabricStateCompleted, nvml.FabricStatusSuccess),
				fabricDevice("GPU-b", clusterA, 7, nvml.FabricStateInProgress, nvml.FabricStatusSuccess),
			}},
			want: nvml.Result{Backend: nvml.BackendNVML, GPUs: []nvml.GPU{
				gpu(0, completed(clusterA, 7)),
				gpu(1, nvml.FabricInfo{Supported: true, State: nvml.FabricStateInProgress, ClusterUUID: clusterA, CliqueID: 7}),
			}},
			wantErr: &nvml.NotReadyError{Index: 1, UUID: "GPU-b", State: nvml.FabricStateInProgress},
			wantV2:  1,
		},
		"registration failed: fabric error": {
			lib: &fakeLibrary{devices: []*fakeDevice{
				fabricDevice("GPU-a", clusterA, 7, nvml.FabricStateCompleted, 15),
			}},
			want: nvml.Result{Backend: nvml.BackendNVML, GPUs: []nvml.GPU{
				gpu(0, nvml.FabricInfo{Supported: true, State: nvml.FabricStateCompleted, Status: 15, ClusterUUID: clusterA, CliqueID: 7}),
			}},
			wantErr: &nvml.FabricError{Index: 0, UUID: "GPU-a", State: nvml.FabricStateCompleted, Status: 15},
			wantV2:  1,
		},
		"GPUs disagree: mismatch": {
			lib: &fakeLibrary{devices: []*fakeDevice{
				fabricDevice("GPU-a", clusterA, 7, nvml.FabricStateCompleted, nvml.FabricStatusSuccess),
				fabricDevice("GPU-b", clusterB, 7, nvml.FabricStateCompleted, nvml.FabricStatusSuccess),
			}},
			want: nvml.Result{Backend: nvml.BackendNVML, GPUs: []nvml.GPU{gpu(0, completed(clusterA, 7)), gpu(1, completed(clusterB, 7))}},
			wantErr: &nvml.MismatchError{
				First: gpu(0, completed(clusterA, 7)), FirstCliqueID: cliqueA7,
				Second: gpu(1, completed(clusterB, 7)), SecondCliqueID: cliqueB7,
			},
			wantV2: 1,
		},
		"Init fails: NVML unavailable, not a fabric error": {
			lib:        &fakeLibrary{initRet: gonvml.ERROR_DRIVER_NOT_LOADED, devices: rackDevices(1)},
			want:       nvml.Result{Backend: nvml.BackendNVML},
			wantErrIs:  []error{nvml.ErrNVMLUnavailable, gonvml.ERROR_DRIVER_NOT_LOADED},
			wantErrMsg: "NVML cannot be initialised: ERROR_DRIVER_NOT_LOADED",
		},
		"counting GPUs fails": {
			lib:        &fakeLibrary{countRet: gonvml.ERROR_UNKNOWN, devices: rackDevices(1)},
			want:       nvml.Result{Backend: nvml.BackendNVML},
			wantErrIs:  []error{gonvml.ERROR_UNKNOWN},
			wantErrMsg: "NVML: counting GPUs: ERROR_UNKNOWN",
		},
		"getting a GPU fails: GPUs before it reported": {
			lib:        &fakeLibrary{devices: rackDevices(2), handleRet: map[int]gonvml.Return{1: gonvml.ERROR_GPU_IS_LOST}},
			want:       nvml.Result{Backend: nvml.BackendNVML, GPUs: gpusA7(1)},
			wantErrIs:  []error{gonvml.ERROR_GPU_IS_LOST},
			wantErrMsg: "NVML: getting GPU 1: ERROR_GPU_IS_LOST",
			wantV2:     1,
		},
		"reading a UUID fails": {
			lib:        &fakeLibrary{devices: []*fakeDevice{{uuid: "GPU-a", uuidRet: gonvml.ERROR_NO_PERMISSION}}},
			want:       nvml.Result{Backend: nvml.BackendNVML, GPUs: []nvml.GPU{}},
			wantErrIs:  []error{gonvml.ERROR_NO_PERMISSION},
			wantErrMsg: "NVML: reading the UUID of GPU 0: ERROR_NO_PERMISSION",
		},
		"fabric info call fails: an NVML error, not a fabric verdict": {
			lib:        &fakeLibrary{devices: []*fakeDevice{{uuid: "GPU-a", retV2: gonvml.ERROR_UNKNOWN}}},
			want:       nvml.Result{Backend: nvml.BackendNVML, GPUs: []nvml.GPU{}},
			wantErrIs:  []error{gonvml.ERROR_UNKNOWN},
			wantErrMsg: "NVML: reading the fabric info of GPU 0 (GPU-a): ERROR_UNKNOWN",
			wantV2:     1,
		},
		"panic inside the library: returned as an error": {
			lib:        &fakeLibrary{devices: []*fakeDevice{{uuid: "GPU-a", panicOnFabric: true}}},
			want:       nvml.Result{Backend: nvml.BackendNVML},
			wantErrIs:  []error{nvml.ErrNVMLUnavailable},
			wantErrMsg: "NVML call panicked: symbol lookup failed",
			wantV2:     1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := &nvmlDiscoverer{lib: tc.lib, libraryPath: nvml.DefaultLibraryPath}
			got, err := d.Discover(context.Background())
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			if tc.wantErrIs == nil {
				if diff := cmp.Diff(tc.wantErr, err); diff != "" {
					t.Errorf("error (-want +got):\n%s", diff)
				}
			}
			for _, target := range tc.wantErrIs {
				if !errors.Is(err, target) {
					t.Errorf("errors.Is(%v, %v) = false, want true", err, target)
				}
			}
			if tc.wantErrIs != nil && (errors.Is(err, nvml.ErrFabricFailed) || errors.Is(err, nvml.ErrFabricNotReady)) {
				t.Errorf("error %v matches a fabric sentinel; it must not", err)
			}
			if tc.wantErrMsg != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErrMsg)) {
				t.Errorf("error = %v, want it to contain %q", err, tc.wantErrMsg)
			}
			if tc.lib.inits != 1 {
				t.Errorf("Init called %d times, want 1", tc.lib.inits)
			}
			if tc.lib.initFlags != gonvml.INIT_FLAG_NO_GPUS {
				t.Errorf("NVML initialised with flags %d, want INIT_FLAG_NO_GPUS (a node whose GPUs are all bound elsewhere must still initialise)", tc.lib.initFlags)
			}
			wantShutdowns := 1
			if tc.lib.initRet != gonvml.SUCCESS {
				wantShutdowns = 0
			}
			if tc.lib.shutdowns != wantShutdowns {
				t.Errorf("Shutdown called %d times, want %d", tc.lib.shutdowns, wantShutdowns)
			}
			if len(tc.lib.devices) > 0 {
				dev := tc.lib.devices[0]
				if dev.v1Calls != tc.wantV1 || dev.v2Calls != tc.wantV2 {
					t.Errorf("GPU 0 fabric calls: v1 %d, v2 %d; want v1 %d, v2 %d", dev.v1Calls, dev.v2Calls, tc.wantV1, tc.wantV2)
				}
			}
		})
	}
}

func TestNVMLDiscoverCancelled(t *testing.T) {
	lib := &fakeLibrary{devices: rackDevices(1)}
	d := &nvmlDiscoverer{lib: lib, libraryPath: nvml.DefaultLibraryPath}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Discover(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Discover with a cancelled context: error = %v, want context.Canceled", err)
	}
	if lib.inits != 0 {
		t.Errorf("Init called %d times on a cancelled context, want 0", lib.inits)
	}
}

// TestNVMLWithoutLibrary runs the real go-nvml against a library path that
// does not exist, as on a machine without the NVIDIA driver: a clear error,
// no panic.
func TestNVMLWithoutLibrary(t *testing.T) {
	const missing = "/nonexistent/libnvidia-ml.so.1"
	cases := map[string]struct {
		backend string
		// wantNewErr: New itself fails.
		wantNewErr bool
		wantMsg    []string
	}{
		"nvml fails on Discover": {
			backend: nvml.BackendNVML,
			wantMsg: []string{"NVML cannot be initialised", missing, "cannot be loaded", "No such file"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d, err := nvml.New(missing)
			if !tc.wantNewErr {
				if err != nil {
					t.Fatalf("New(%q): %v", tc.backend, err)
				}
				var res nvml.Result
				res, err = d.Discover(context.Background())
				if diff := cmp.Diff(nvml.Result{Backend: nvml.BackendNVML}, res); diff != "" {
					t.Errorf("result (-want +got):\n%s", diff)
				}
			} else if d != nil {
				t.Errorf("New(%q) returned a Discoverer along with its error", tc.backend)
			}
			if !errors.Is(err, nvml.ErrNVMLUnavailable) {
				t.Fatalf("error = %v, want ErrNVMLUnavailable", err)
			}
			if errors.Is(err, nvml.ErrFabricFailed) || errors.Is(err, nvml.ErrFabricNotReady) {
				t.Errorf("error %v matches a fabric sentinel; it must not", err)
			}
			for _, want := range tc.wantMsg {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

// TestNVMLDefaultLibrary runs the real backend with the default library:
// on a machine without a driver it must fail cleanly, with one it must read.
func TestNVMLDefaultLibrary(t *testing.T) {
	d, err := nvml.New("")
	if err != nil {
		t.Fatalf("New(%q): %v", nvml.BackendNVML, err)
	}
	res, err := d.Discover(context.Background())
	if probeLibrary(nvml.DefaultLibraryPath) != nil {
		if !errors.Is(err, nvml.ErrNVMLUnavailable) {
			t.Fatalf("without %s: error = %v, want ErrNVMLUnavailable", nvml.DefaultLibraryPath, err)
		}
		return
	}
	t.Logf("NVML present:\n%s", nvml.Describe(res, err))
	if errors.Is(err, nvml.ErrNVMLUnavailable) {
		t.Fatalf("NVML loads but Discover says it is unavailable: %v", err)
	}
}

func completed(cluster [16]byte, clique uint32) nvml.FabricInfo {
	return nvml.FabricInfo{Supported: true, State: nvml.FabricStateCompleted, Status: nvml.FabricStatusSuccess, ClusterUUID: cluster, CliqueID: clique}
}

func gpu(i int, f nvml.FabricInfo) nvml.GPU {
	return nvml.GPU{Index: i, UUID: "GPU-" + string(rune('a'+i)), Fabric: f}
}
