//go:build cgo

package nodehost

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"cdplane/internal/nvml"
	_ "cdplane/internal/nvml/nvmlreal" // the real backend, as the simulated plugin binary links it
	"cdplane/internal/sim/nvmlsim"
)

// A simulated node, written and laid out as `sim up` does it, offers a plugin process what a GPU
// node does: libnvidia-ml.so.1 under the driver root, which the real NVML backend loads by its
// full path and reads the node's GPUs and clique from, following changes of the node's spec.
func TestDriverRootNVML(t *testing.T) {
	bin, root := t.TempDir(), t.TempDir()
	lib := filepath.Join(bin, nvmlsim.LibraryFile)
	if err := nvmlsim.BuildLibrary(context.Background(), lib); err != nil {
		t.Fatal(err)
	}
	spec := nvmlsim.Rack(2, "n1")
	if err := WriteNode(root, spec); err != nil {
		t.Fatal(err)
	}
	imexSim := filepath.Join(bin, "imex-sim")
	if err := os.WriteFile(imexSim, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := InstallDriverRoot(root, DriverFiles{IMEXSim: imexSim, NVMLLibrary: lib, DriverVersion: spec.Driver()}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(NodeDirEnv, root) // as the simulated kubelet sets it on the plugin's container
	d, err := nvml.New(filepath.Join(root, DriverRootLib(), "libnvidia-ml.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.Discover(context.Background())
	if err != nil || res.CliqueID != nvmlsim.RackCliqueID(2) || len(res.GPUs) != nvmlsim.GPUsPerNode || res.Backend != nvml.BackendNVML {
		t.Fatalf("discovered %+v, %v; want the rack's clique from %d GPUs through NVML", res, err, nvmlsim.GPUsPerNode)
	}
	if res.GPUs[1].UUID != nvmlsim.GPUUUID("n1", 1) {
		t.Errorf("GPU 1 is %s, want %s", res.GPUs[1].UUID, nvmlsim.GPUUUID("n1", 1))
	}
	spec.Fabric.State = nvml.FabricStateInProgress
	if err := WriteNode(root, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Discover(context.Background()); !errors.Is(err, nvml.ErrFabricNotReady) {
		t.Errorf("after the fabric went back to registering: %v, want ErrFabricNotReady", err)
	}
}
