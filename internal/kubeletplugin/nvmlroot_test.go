package kubeletplugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cdplane/internal/component"
	"cdplane/internal/nvml"
	"cdplane/internal/testutil"
)

// recordingBackend stands for the real NVML backend: it records the library paths it is asked
// to load and answers one GPU without fabric.
type recordingBackend struct{ paths []string }

func (b *recordingBackend) register(t *testing.T) {
	nvml.RegisterRealBackend(nvml.RealBackend{
		New: func(p string) (nvml.Discoverer, error) {
			b.paths = append(b.paths, p)
			if _, err := os.Stat(p); err != nil {
				return nil, errors.Join(nvml.ErrNVMLUnavailable, err)
			}
			return discovererFunc(func(context.Context) (nvml.Result, error) {
				if _, err := os.Stat(p); err != nil {
					return nvml.Result{}, errors.Join(nvml.ErrNVMLUnavailable, err)
				}
				return nvml.Result{Backend: nvml.BackendNVML, GPUs: []nvml.GPU{{UUID: "GPU-1"}}}, nil
			}), nil
		},
	})
	t.Cleanup(func() { nvml.RegisterRealBackend(nvml.RealBackend{}) })
}

type discovererFunc func(context.Context) (nvml.Result, error)

func (f discovererFunc) Discover(ctx context.Context) (nvml.Result, error) { return f(ctx) }

// With the command's defaults the plugin loads NVML by its full path under the driver root as
// the plugin reads it: the image has no driver library, so the loader's own search by bare
// name would find nothing on a GPU node.
func TestNVMLFromDriverRoot(t *testing.T) {
	root := testutil.DriverRootFixture(t, map[string]bool{"usr/lib64/libnvidia-ml.so.580.82.07": false})
	env := map[string]string{"NODE_NAME": "n1", "POD_NAMESPACE": "ns", "NVIDIA_DRIVER_ROOT": "/run/nvidia/driver", "CONTAINER_DRIVER_ROOT": root}
	inv := component.Invocation{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	o := NewCommandOptions(inv)
	o.AddFlags(inv.NewFlagSet("cdplane-kubelet-plugin"))
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	var b recordingBackend
	b.register(t)
	d, err := o.nvmlDiscoverer()
	if err != nil {
		t.Fatal(err)
	}

	// No libnvidia-ml.so.1 yet (a driver container not started): unavailable, every place named.
	_, err = d.Discover(t.Context())
	if !errors.Is(err, nvml.ErrNVMLUnavailable) {
		t.Fatalf("Discover without the library: %v, want ErrNVMLUnavailable", err)
	}
	for _, w := range []string{"NVIDIA driver root /run/nvidia/driver", filepath.Join(root, "usr/lib64/libnvidia-ml.so.1"), filepath.Join(root, "usr/lib/libnvidia-ml.so.1")} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %s", err, w)
		}
	}
	if len(b.paths) != 0 {
		t.Errorf("loaded %v before the library existed", b.paths)
	}

	// The driver's link appears: the versioned file is loaded by its full path.
	if err := os.Symlink("/usr/lib64/libnvidia-ml.so.580.82.07", filepath.Join(root, "usr/lib64/libnvidia-ml.so.1")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Discover(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(root, "usr/lib64/libnvidia-ml.so.580.82.07")
	if len(b.paths) != 1 || b.paths[0] != want {
		t.Fatalf("loaded %v, want [%s]", b.paths, want)
	}

	// A driver upgrade replaces the versioned library: the next discovery finds the new one.
	if err := os.Remove(want); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Discover(t.Context()); !errors.Is(err, nvml.ErrNVMLUnavailable) {
		t.Fatalf("Discover after the library went: %v", err)
	}
	upgraded := filepath.Join(root, "usr/lib64/libnvidia-ml.so.590.10.01")
	if err := os.WriteFile(upgraded, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "usr/lib64/libnvidia-ml.so.1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("libnvidia-ml.so.590.10.01", filepath.Join(root, "usr/lib64/libnvidia-ml.so.1")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Discover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := b.paths[len(b.paths)-1]; got != upgraded {
		t.Errorf("after the upgrade loaded %s, want %s", got, upgraded)
	}
}

// --nvml-library stays an override, loaded as given.
func TestNVMLLibraryOverride(t *testing.T) {
	env := map[string]string{"NODE_NAME": "n1", "POD_NAMESPACE": "ns"}
	inv := component.Invocation{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	o := NewCommandOptions(inv)
	fs := inv.NewFlagSet("cdplane-kubelet-plugin")
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--nvml-library=/opt/nvml/libnvidia-ml.so.1"}); err != nil {
		t.Fatal(err)
	}
	var b recordingBackend
	b.register(t)
	if _, err := o.nvmlDiscoverer(); err == nil {
		t.Fatal("no error for an absent override")
	}
	if len(b.paths) != 1 || b.paths[0] != "/opt/nvml/libnvidia-ml.so.1" {
		t.Errorf("loaded %v, want the override", b.paths)
	}
}
