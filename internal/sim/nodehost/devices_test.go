package nodehost

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"cdplane/internal/component"
	"cdplane/internal/imex"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/sim/imexsim"
	"cdplane/internal/sim/nvmlsim"
)

// A simulated node offers /dev/nvidiactl and the IMEX management device that its capability
// file names, as empty files; writing them again keeps them.
func TestWriteDeviceNodes(t *testing.T) {
	dir := t.TempDir()
	if err := WriteNode(dir, nvmlsim.Rack(0, "n1")); err != nil {
		t.Fatal(err)
	}
	if err := WriteDeviceNodes(dir); err != nil {
		t.Fatal(err)
	}
	capData, err := os.ReadFile(filepath.Join(dir, IMEXMgmtCapabilityPath))
	if err != nil {
		t.Fatal(err)
	}
	minor, err := kubeletplugin.ParseCapabilityMinor(capData)
	if err != nil || minor != IMEXMgmtMinor {
		t.Fatalf("the capability file's minor: %d (err %v), want %d", minor, err, IMEXMgmtMinor)
	}
	for _, p := range []string{"/dev/nvidiactl", "/dev/nvidia-caps/nvidia-cap1"} {
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
			t.Errorf("%s: %v (err %v), want an empty file", p, fi, err)
		}
	}
	ctl := filepath.Join(dir, CtlDevicePath)
	if err := os.WriteFile(ctl, []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteDeviceNodes(dir); err != nil {
		t.Fatalf("writing them again: %v", err)
	}
	if data, err := os.ReadFile(ctl); err != nil || string(data) != "kept" {
		t.Errorf("after writing again: %q (err %v), want the file kept", data, err)
	}
}

// An in-process daemon's IMEX gets the container's view and LD_LIBRARY_PATH from the daemon
// container's environment: on a node written by WriteNode and WriteDeviceNodes it starts when
// its view has the devices and the library, and refuses to without /dev/nvidiactl.
func TestInProcessDaemonContainerView(t *testing.T) {
	nodeDir := t.TempDir()
	if err := WriteNode(nodeDir, nvmlsim.Rack(0, "n1")); err != nil {
		t.Fatal(err)
	}
	if err := WriteDeviceNodes(nodeDir); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(nodeDir, "usr/lib/aarch64-linux-gnu", imexsim.NVMLLibrary)
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	nodes, config := filepath.Join(dir, "nodes.cfg"), filepath.Join(dir, "config.cfg")
	for path, content := range map[string]string{
		nodes:  "127.128.0.57\n",
		config: "BIND_INTERFACE_IP=\nSERVER_PORT=0\nIMEX_NODE_CONFIG_FILE=" + nodes + "\n",
	} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	full := map[string]string{
		"/dev/nvidiactl":               filepath.Join(nodeDir, CtlDevicePath),
		"/dev/nvidia-caps/nvidia-cap1": filepath.Join(nodeDir, IMEXMgmtDevicePath),
		"/usr/local/nvidia/lib":        filepath.Dir(lib),
	}
	noCtl := map[string]string{}
	for k, v := range full {
		if k != "/dev/nvidiactl" {
			noCtl[k] = v
		}
	}
	for name, tc := range map[string]struct {
		view    map[string]string
		missing string
	}{
		"all there":         {view: full},
		"no /dev/nvidiactl": {view: noCtl, missing: "/dev/nvidiactl"},
	} {
		t.Run(name, func(t *testing.T) {
			env := map[string]string{
				NodeDirEnv: nodeDir, imexsim.LocalAddrsEnv: "127.128.0.57",
				imexsim.ContainerPathsEnv: imexsim.EncodeContainerPaths(tc.view),
				imexsim.LibraryPathEnv:    "/usr/local/nvidia/lib",
				imexsim.ShutdownDelayEnv:  "0",
			}
			host := InProcessDaemon(component.Invocation{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
			x := host.NewIMEX(imex.Options{ConfigPath: config, HostsPath: filepath.Join(dir, "hosts"), Log: testLogger(t)})
			_, err := x.Start(withTimeout(t))
			if tc.missing == "" {
				if err != nil {
					t.Fatalf("Start: %v", err)
				}
				if err := x.Stop(withTimeout(t)); err != nil {
					t.Errorf("Stop: %v", err)
				}
				return
			}
			var missing *imexsim.MissingError
			if !errors.As(err, &missing) || missing.Path != tc.missing {
				_ = x.Stop(context.Background())
				t.Fatalf("Start: %v, want a MissingError for %s", err, tc.missing)
			}
		})
	}
}
