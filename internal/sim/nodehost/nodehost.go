// Package nodehost is what a simulated node offers cdplane's node components in place of a GPU
// host: NVML readings (the node's simulated NVML spec), the NVIDIA driver's /proc files, device
// nodes that are empty files, and a driver root whose nvidia-imex and nvidia-imex-ctl are the
// simulated IMEX. The product components take these through their Host hooks and their flags,
// and never learn that they run on a simulated node.
package nodehost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"cdplane/internal/component"
	"cdplane/internal/daemon"
	"cdplane/internal/imex"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/nvml"
	"cdplane/internal/sim/imexsim"
	"cdplane/internal/sim/nvmlsim"
)

// NodeDirEnv is set by the simulated kubelet on every container: the host directory of the
// container's node, below which the node's host paths live.
const NodeDirEnv = "CDPLANE_SIM_NODE_DIR"

// Paths of a node's host files, below its node directory.
const (
	// NVMLSpecPath holds the node's simulated NVML (nvmlsim.Node as JSON).
	NVMLSpecPath = "/etc/cdplane/nvml-sim.json"
	// ProcDevicesPath and IMEXMgmtCapabilityPath stand for the driver's /proc files.
	ProcDevicesPath        = "/proc/devices"
	IMEXMgmtCapabilityPath = "/proc/driver/nvidia/capabilities/fabric-imex-mgmt"
)

// Device numbers the simulated driver registers.
const (
	channelMajor = 234
	capsMajor    = 235
	// IMEXMgmtMinor is the minor number of the IMEX management device in the capability file.
	IMEXMgmtMinor = 1
)

// WriteNode writes a simulated node's host files into nodeDir: its NVML spec and the driver's
// /proc files.
func WriteNode(nodeDir string, spec nvmlsim.Node) error {
	data, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	files := map[string]string{
		NVMLSpecPath: string(data),
		ProcDevicesPath: fmt.Sprintf("Character devices:\n  1 mem\n%d nvidia-caps-imex-channels\n%d nvidia-caps\n\nBlock devices:\n  8 sd\n",
			channelMajor, capsMajor),
		IMEXMgmtCapabilityPath: fmt.Sprintf("DeviceFileMinor: %d\nDeviceFileMode: 256\nDeviceFileModify: 1\n", IMEXMgmtMinor),
	}
	for p, content := range files {
		path := filepath.Join(nodeDir, p)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Plugin is the host of a kubelet plugin on the node named by the invocation's NodeDirEnv: its
// simulated NVML, its /proc files, and device nodes as empty files (creating a character device
// would need privileges a simulation should not).
func Plugin(inv component.Invocation) (kubeletplugin.Host, error) {
	nodeDir := inv.Getenv(NodeDirEnv)
	if nodeDir == "" {
		return kubeletplugin.Host{}, fmt.Errorf("%s is not set: this plugin must run on a simulated node", NodeDirEnv)
	}
	disc := specFile(filepath.Join(nodeDir, NVMLSpecPath))
	if _, err := disc.read(); err != nil {
		return kubeletplugin.Host{}, err
	}
	return kubeletplugin.Host{
		Discoverer:     disc,
		ReadHostFile:   func(p string) ([]byte, error) { return os.ReadFile(onNode(nodeDir, p)) },
		MakeCharDevice: makeFileDevice,
	}, nil
}

// specFile is a simulated node's NVML read from its spec file on every discovery, so that a
// change of the node's fabric (registration finishing, failing) reaches a running plugin, as a
// real GPU's fabric state changes under a running driver.
type specFile string

func (f specFile) read() (nvmlsim.Node, error) {
	data, err := os.ReadFile(string(f))
	if err != nil {
		return nvmlsim.Node{}, fmt.Errorf("the simulated node's NVML: %w", err)
	}
	return nvmlsim.Parse(data)
}

// Discover reads the spec file and discovers from it.
func (f specFile) Discover(ctx context.Context) (nvml.Result, error) {
	spec, err := f.read()
	if err != nil {
		return nvml.Result{Backend: nvmlsim.Backend}, err
	}
	return spec.Discover(ctx)
}

// onNode maps a host path under /proc to the node's copy; others are already node paths (the
// simulated kubelet remapped them).
func onNode(nodeDir, p string) string {
	if strings.HasPrefix(p, "/proc/") {
		return filepath.Join(nodeDir, p)
	}
	return p
}

// makeFileDevice creates an empty file standing for a character device.
func makeFileDevice(path string, _, _ uint32) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return fmt.Errorf("creating simulated device %s: %w", path, err)
	}
	return f.Close()
}

// InProcessDaemon is the host of a daemon run in the simulated kubelet's process: IMEX is the
// simulated one in the same process (a process per node would not fit thousands of nodes on one
// machine). A daemon run as a process needs no host: it runs the simulated nvidia-imex that its
// daemon claim's CDI edits mount and name (IMEX_BINARY), from the node's driver root (see
// InstallDriverRoot).
func InProcessDaemon() daemon.Host {
	return daemon.Host{NewIMEX: func(o imex.Options) imex.Interface { return imexsim.New(o) }}
}

// DriverRootBin is the directory of a simulated driver root that holds nvidia-imex and
// nvidia-imex-ctl.
const DriverRootBin = "usr/bin"

// InstallDriverRoot lays out a simulated driver root at root, a node's directory (the node's
// "/", the chart's default nvidiaDriverRoot): nvidia-imex and nvidia-imex-ctl in usr/bin are
// links to the imex-sim binary. The kubelet plugin finds them there as it finds the real ones
// on a GPU node, and hands them to daemon containers through the daemon claim's CDI mounts.
// There is no simulated NVML library: the plugin gives daemons CLIQUE_ID, so they need none.
func InstallDriverRoot(root, imexSim string) error {
	bin := filepath.Join(root, DriverRootBin)
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	for _, name := range []string{"nvidia-imex", "nvidia-imex-ctl"} {
		link := filepath.Join(bin, name)
		_ = os.Remove(link)
		if err := os.Symlink(imexSim, link); err != nil {
			return err
		}
	}
	return nil
}

// RunPlugin runs the kubelet plugin with the simulated node's host: the simulated image's
// cdplane-kubelet-plugin binary and the in-process runner both call it.
func RunPlugin(ctx context.Context, inv component.Invocation) error {
	host, err := Plugin(inv)
	if err != nil {
		return err
	}
	return kubeletplugin.Run(ctx, inv, host)
}
