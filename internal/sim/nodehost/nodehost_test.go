package nodehost

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"cdplane/internal/component"
	"cdplane/internal/nvml"
	"cdplane/internal/sim/nvmlsim"
)

func hostOf(t *testing.T, dir string) component.Invocation {
	t.Helper()
	return component.Invocation{LookupEnv: func(k string) (string, bool) { return dir, k == NodeDirEnv }}
}

// A plugin on a simulated node discovers from the node's spec file each time, so a fabric that
// changes while the plugin runs is seen; the driver's /proc files are the node's.
func TestPluginHost(t *testing.T) {
	dir := t.TempDir()
	spec := nvmlsim.Rack(0, "n1")
	if err := WriteNode(dir, spec); err != nil {
		t.Fatal(err)
	}
	host, err := Plugin(hostOf(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	res, err := host.Discoverer.Discover(context.Background())
	if err != nil || res.CliqueID != nvmlsim.RackCliqueID(0) {
		t.Fatalf("discovered %q, %v; want the rack's clique", res.CliqueID, err)
	}
	spec.Fabric.State = nvml.FabricStateInProgress
	if err := WriteNode(dir, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := host.Discoverer.Discover(context.Background()); !errors.Is(err, nvml.ErrFabricNotReady) {
		t.Errorf("after the fabric went back to registering: %v, want ErrFabricNotReady", err)
	}
	data, err := host.ReadHostFile(ProcDevicesPath)
	if err != nil || len(data) == 0 {
		t.Errorf("the node's /proc/devices: %q, %v", data, err)
	}
	dev := filepath.Join(dir, "dev", "x")
	if err := os.MkdirAll(filepath.Dir(dev), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := host.MakeCharDevice(dev, 1, 2); err != nil {
		t.Fatal(err)
	}
	if err := host.MakeCharDevice(dev, 1, 2); err != nil {
		t.Errorf("making an existing device again: %v", err)
	}
}

func TestPluginHostNeedsASimulatedNode(t *testing.T) {
	if _, err := Plugin(component.Invocation{LookupEnv: func(string) (string, bool) { return "", false }}); err == nil {
		t.Error("a plugin host without a node directory")
	}
	if _, err := Plugin(hostOf(t, t.TempDir())); err == nil {
		t.Error("a plugin host without an NVML spec")
	}
}

// A node's driver root holds the simulated IMEX where the kubelet plugin looks for the real
// one, and installing it again (a restarted simulated kubelet) replaces the links.
func TestInstallDriverRoot(t *testing.T) {
	root, imexSim := t.TempDir(), filepath.Join(t.TempDir(), "imex-sim")
	if err := os.WriteFile(imexSim, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := InstallDriverRoot(root, imexSim); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"usr/bin/nvidia-imex", "usr/bin/nvidia-imex-ctl"} {
		target, err := os.Readlink(filepath.Join(root, name))
		if err != nil || target != imexSim {
			t.Errorf("%s links to %q (%v), want %s", name, target, err, imexSim)
		}
	}
}
