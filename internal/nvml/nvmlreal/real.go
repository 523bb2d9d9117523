//go:build cgo

// Package nvmlreal is the real NVML backend of package nvml, read through go-nvml. Import it
// for its side effect in binaries that run on GPU nodes; see nvml.RealBackend.
package nvmlreal

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"cdplane/internal/nvml"
)

// NVML's two fabric info entry points: the versioned one (R550 and later) and
// the first one, deprecated since 13.0. Drivers that predate both have no
// fabric info. Calling a symbol the driver lacks through cgo would crash the
// process, so their presence is checked first.
const (
	fabricInfoVSymbol  = "nvmlDeviceGetGpuFabricInfoV"
	fabricInfoV1Symbol = "nvmlDeviceGetGpuFabricInfo"
)

func init() {
	nvml.RegisterRealBackend(nvml.RealBackend{New: newNVML, Probe: probeLibrary})
}

// nvmlLibrary is the part of go-nvml the real backend calls, so that tests can
// stand in for the library.
type nvmlLibrary interface {
	InitWithFlags(flags uint32) gonvml.Return
	Shutdown() gonvml.Return
	DeviceGetCount() (int, gonvml.Return)
	DeviceGetHandleByIndex(index int) (nvmlDevice, gonvml.Return)
	LookupSymbol(name string) error
}

// nvmlDevice is the part of go-nvml's Device the real backend calls.
type nvmlDevice interface {
	GetUUID() (string, gonvml.Return)
	GetGpuFabricInfo() (gonvml.GpuFabricInfo, gonvml.Return)
	// GetGpuFabricInfoV2 is go-nvml's GetGpuFabricInfoV().V2().
	GetGpuFabricInfoV2() (gonvml.GpuFabricInfo_v2, gonvml.Return)
}

// goNVML adapts go-nvml's Interface to nvmlLibrary.
type goNVML struct{ lib gonvml.Interface }

func (g goNVML) InitWithFlags(f uint32) gonvml.Return { return g.lib.InitWithFlags(f) }
func (g goNVML) Shutdown() gonvml.Return              { return g.lib.Shutdown() }
func (g goNVML) DeviceGetCount() (int, gonvml.Return) { return g.lib.DeviceGetCount() }
func (g goNVML) LookupSymbol(name string) error       { return g.lib.Extensions().LookupSymbol(name) }
func (g goNVML) DeviceGetHandleByIndex(i int) (nvmlDevice, gonvml.Return) {
	d, ret := g.lib.DeviceGetHandleByIndex(i)
	return goNVMLDevice{d}, ret
}

// goNVMLDevice adapts go-nvml's Device to nvmlDevice.
type goNVMLDevice struct{ gonvml.Device }

func (d goNVMLDevice) GetGpuFabricInfoV2() (gonvml.GpuFabricInfo_v2, gonvml.Return) {
	return d.GetGpuFabricInfoV().V2()
}

// nvmlDiscoverer is the real backend.
type nvmlDiscoverer struct {
	lib         nvmlLibrary
	libraryPath string
}

func newNVML(libraryPath string) (nvml.Discoverer, error) {
	path := nvml.LibraryPathOrDefault(libraryPath)
	return &nvmlDiscoverer{
		lib:         goNVML{lib: gonvml.New(gonvml.WithLibraryPath(path))},
		libraryPath: path,
	}, nil
}

// Discover initialises NVML, reads every GPU, shuts NVML down and derives the
// clique id. A panic inside go-nvml is returned as an error.
func (d *nvmlDiscoverer) Discover(ctx context.Context) (res nvml.Result, err error) {
	res.Backend = nvml.BackendNVML
	if err := ctx.Err(); err != nil {
		return res, err
	}
	defer func() {
		if r := recover(); r != nil {
			res.CliqueID = ""
			err = fmt.Errorf("%w: NVML call panicked: %v", nvml.ErrNVMLUnavailable, r)
		}
	}()
	// NO_GPUS: NVML initialises even when every GPU is bound elsewhere (passed through to VMs,
	// or to another driver), as NVIDIA's driver initialises it; the node then has no GPU
	// readings, so no clique, instead of failing as if the driver were missing.
	if ret := d.lib.InitWithFlags(gonvml.INIT_FLAG_NO_GPUS); ret != gonvml.SUCCESS {
		return res, d.initError(ret)
	}
	// The readings are complete once Shutdown runs; a failed Shutdown leaks
	// at most a handle and must not make a healthy node look broken.
	defer func() { _ = d.lib.Shutdown() }()

	gpus, err := readGPUs(d.lib)
	res.GPUs = gpus
	if err != nil {
		return res, err
	}
	res.CliqueID, err = nvml.DeriveCliqueID(gpus)
	return res, err
}

func (d *nvmlDiscoverer) initError(ret gonvml.Return) error {
	if ret == gonvml.ERROR_LIBRARY_NOT_FOUND {
		if err := probeLibrary(d.libraryPath); err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: %w", nvml.ErrNVMLUnavailable, ret)
}

// readGPUs reads the UUID and fabric info of every GPU, in index order. On an
// error it returns the GPUs read so far.
func readGPUs(lib nvmlLibrary) ([]nvml.GPU, error) {
	n, ret := lib.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		return nil, fmt.Errorf("NVML: counting GPUs: %w", ret)
	}
	api := fabricAPI{
		hasV:  lib.LookupSymbol(fabricInfoVSymbol) == nil,
		hasV1: lib.LookupSymbol(fabricInfoV1Symbol) == nil,
	}
	gpus := make([]nvml.GPU, 0, n)
	for i := range n {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			return gpus, fmt.Errorf("NVML: getting GPU %d: %w", i, ret)
		}
		uuid, ret := dev.GetUUID()
		if ret != gonvml.SUCCESS {
			return gpus, fmt.Errorf("NVML: reading the UUID of GPU %d: %w", i, ret)
		}
		gpu := nvml.GPU{Index: i, UUID: uuid}
		info, ret := api.read(dev)
		switch ret {
		case gonvml.SUCCESS:
			gpu.Fabric = info
		case gonvml.ERROR_NOT_SUPPORTED:
			// No fabric on this GPU: gpu.Fabric.Supported stays false.
		default:
			return gpus, fmt.Errorf("NVML: reading the fabric info of GPU %d (%s): %w", i, uuid, ret)
		}
		gpus = append(gpus, gpu)
	}
	return gpus, nil
}

// fabricAPI says which fabric info entry points the driver has.
type fabricAPI struct{ hasV, hasV1 bool }

// read reads a GPU's fabric info through the newest entry point the driver
// has, falling back to the first one when the driver refuses the struct
// version; ERROR_NOT_SUPPORTED when the driver has neither.
func (a fabricAPI) read(dev nvmlDevice) (nvml.FabricInfo, gonvml.Return) {
	if a.hasV {
		info, ret := dev.GetGpuFabricInfoV2()
		if ret != gonvml.ERROR_ARGUMENT_VERSION_MISMATCH || !a.hasV1 {
			return fabricInfo(info.ClusterUuid, info.CliqueId, info.State, info.Status), ret
		}
	}
	if a.hasV1 {
		info, ret := dev.GetGpuFabricInfo()
		return fabricInfo(info.ClusterUuid, info.CliqueId, info.State, info.Status), ret
	}
	return nvml.FabricInfo{}, gonvml.ERROR_NOT_SUPPORTED
}

func fabricInfo(clusterUUID [16]uint8, cliqueID uint32, state uint8, status uint32) nvml.FabricInfo {
	return nvml.FabricInfo{
		Supported:   true,
		State:       nvml.FabricState(state),
		Status:      nvml.FabricStatus(status),
		ClusterUUID: clusterUUID,
		CliqueID:    cliqueID,
	}
}

// probeLibrary loads and unloads the NVML library to learn whether it is
// there, and if not, why (the dynamic loader's message).
func probeLibrary(path string) error {
	lib := dl.New(path, dl.RTLD_LAZY|dl.RTLD_GLOBAL)
	if err := lib.Open(); err != nil {
		return fmt.Errorf("%w: %s cannot be loaded (is the NVIDIA driver installed?): %w", nvml.ErrNVMLUnavailable, path, err)
	}
	if err := lib.Close(); err != nil {
		return fmt.Errorf("closing %s after probing it: %w", path, err)
	}
	return nil
}
