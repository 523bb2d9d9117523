// Package nodehost is what a simulated node offers cdplane's node components in place of a GPU
// host: NVML (a driver root whose libnvidia-ml.so.1 is the simulated NVML library, reading the
// node's simulated NVML spec), the NVIDIA driver's /proc files, device nodes that are empty
// files, nvidia-imex and nvidia-imex-ctl in the driver root that are the simulated IMEX, and,
// for host-managed IMEX, the simulated IMEX run as a host service. The product components take
// these through their Host hooks and their flags, and never learn that they run on a simulated
// node. Only the simulator's in-process mode hands the kubelet plugin a Go stand-in for NVML
// (InProcessPlugin).
package nodehost

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"cdplane/internal/atomicfile"
	"cdplane/internal/component"
	"cdplane/internal/daemon"
	"cdplane/internal/imex"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/nvml"
	"cdplane/internal/sim/imexsim"
	"cdplane/internal/sim/nvmlsim"
)

// NodeDirEnv is set by the simulated kubelet on every container: the host directory of the
// container's node, below which the node's host paths live. It is the simulated IMEX's
// imexsim.NodeDirEnv.
const NodeDirEnv = imexsim.NodeDirEnv

// Paths of a node's host files, below its node directory.
const (
	// NVMLSpecPath holds the node's simulated NVML (nvmlsim.Node as JSON): the simulator's
	// record, which the in-process mode's Go stand-in reads.
	NVMLSpecPath = "/etc/cdplane/nvml-sim.json"
	// NVMLConfPath holds the same in the text form the simulated NVML library reads at every
	// nvmlInit (nvmlsim.RenderConf).
	NVMLConfPath = nvmlsim.ConfPath
	// ProcDevicesPath and IMEXMgmtCapabilityPath stand for the driver's /proc files.
	ProcDevicesPath        = "/proc/devices"
	IMEXMgmtCapabilityPath = "/proc/driver/nvidia/capabilities/fabric-imex-mgmt"
	// DriverVersionPath is the loaded driver's version file, in the real one's format (the
	// kubelet plugin and the simulated IMEX read the version from it).
	DriverVersionPath = imexsim.DriverVersionPath
)

// Device numbers the simulated driver registers.
const (
	channelMajor = 234
	capsMajor    = 235
	// IMEXMgmtMinor is the minor number of the IMEX management device in the capability file.
	IMEXMgmtMinor = 1
)

// WriteNode writes a simulated node's host files into nodeDir: its NVML spec (WriteNVML) and the
// driver's /proc files, the version file naming the spec's driver version.
func WriteNode(nodeDir string, spec nvmlsim.Node) error {
	if err := WriteNVML(nodeDir, spec); err != nil {
		return err
	}
	files := map[string]string{
		ProcDevicesPath: fmt.Sprintf("Character devices:\n  1 mem\n%d nvidia-caps-imex-channels\n%d nvidia-caps\n\nBlock devices:\n  8 sd\n",
			channelMajor, capsMajor),
		IMEXMgmtCapabilityPath: fmt.Sprintf("DeviceFileMinor: %d\nDeviceFileMode: 256\nDeviceFileModify: 1\n", IMEXMgmtMinor),
		DriverVersionPath:      DriverVersionFile(spec.Driver()),
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

// WriteNVML writes, or rewrites, a simulated node's NVML spec into nodeDir: the JSON record
// (NVMLSpecPath) and the simulated library's text form (NVMLConfPath). Every writer of a node's
// NVML goes through it, so that the two never differ. Each file is replaced whole: a plugin
// reading it meanwhile reads the old spec or the new.
func WriteNVML(nodeDir string, spec nvmlsim.Node) error {
	conf, err := nvmlsim.RenderConf(spec)
	if err != nil {
		return fmt.Errorf("the simulated node's NVML: %w", err)
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("the simulated node's NVML: %w", err)
	}
	for p, content := range map[string][]byte{NVMLSpecPath: data, NVMLConfPath: conf} {
		if err := atomicfile.WriteVolatile(filepath.Join(nodeDir, p), content, 0o644); err != nil {
			return fmt.Errorf("the simulated node's NVML: %w", err)
		}
	}
	return nil
}

// DriverVersionFile is the content of the driver's version file for a driver version, as the
// open kernel module of a GB200 node (aarch64) writes it.
func DriverVersionFile(version string) string {
	return fmt.Sprintf("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  %s  Release Build  "+
		"(dvs-builder@U16-I3-B03-4-3)  Tue Jul 29 19:13:46 UTC 2025\n"+
		"GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n", version)
}

// Plugin is the host of a kubelet plugin process on the node named by the invocation's
// NodeDirEnv: its /proc files. It has no Discoverer: the plugin reads NVML as on a GPU node,
// loading libnvidia-ml.so.1 from its driver root, where InstallDriverRoot put the simulated
// library, which reads the node's spec (NVMLConfPath) at every nvmlInit.
func Plugin(inv component.Invocation) (kubeletplugin.Host, error) {
	nodeDir := inv.Getenv(NodeDirEnv)
	if nodeDir == "" {
		return kubeletplugin.Host{}, fmt.Errorf("%s is not set: this plugin must run on a simulated node", NodeDirEnv)
	}
	return kubeletplugin.Host{
		ReadHostFile: func(p string) ([]byte, error) { return os.ReadFile(onNode(nodeDir, p)) },
	}, nil
}

// InProcessPlugin is the host of a kubelet plugin run in the simulated kubelet's process (the
// in-process mode, and tests that run a plugin in theirs): Plugin's, with a Go stand-in for
// NVML that reads the node's JSON spec (NVMLSpecPath) at every discovery. One process serves
// hundreds of nodes there, and a process loads a shared library once and binds its symbols
// once, so the simulated library could answer as one node only; the stand-in feeds the same
// readings to the same derivation (the nvmlsim tests hold the two to the same results).
func InProcessPlugin(inv component.Invocation) (kubeletplugin.Host, error) {
	host, err := Plugin(inv)
	if err != nil {
		return host, err
	}
	disc := specFile(filepath.Join(inv.Getenv(NodeDirEnv), NVMLSpecPath))
	if _, err := disc.read(); err != nil {
		return kubeletplugin.Host{}, err
	}
	host.Discoverer = disc
	return host, nil
}

// specFile is a simulated node's NVML read from its JSON spec file on every discovery, so that a
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

// InProcessDaemon is the host of a daemon run in the simulated kubelet's process: IMEX is the
// simulated one in the same process (a process per node would not fit thousands of nodes on one
// machine). It gets the stand-ins that the simulated kubelet set in the daemon container's
// environment (inv), as a process would inherit them: the node directory, the pod's addresses,
// its resolv.conf and hosts file (see imexsim's environment variables). A daemon run as a
// process needs no host: it runs the simulated nvidia-imex that its daemon claim's CDI edits
// mount and name (IMEX_BINARY), from the node's driver root (see InstallDriverRoot), which
// inherits the container's environment.
func InProcessDaemon(inv component.Invocation) daemon.Host {
	env := standInEnv(inv)
	return daemon.Host{NewIMEX: func(o imex.Options) imex.Interface {
		o.Env = append(slices.Clip(o.Env), env...)
		return imexsim.New(o)
	}}
}

// standInEnv is the simulated IMEX's stand-ins set in inv's environment, as KEY=VALUE.
func standInEnv(inv component.Invocation) []string {
	var env []string
	for _, k := range []string{imexsim.NodeDirEnv, imexsim.LocalAddrsEnv, imexsim.ResolvConfEnv, imexsim.HostsFileEnv, imexsim.LinkRetryMaxEnv,
		imexsim.ContainerPathsEnv, imexsim.LibraryPathEnv, imexsim.ShutdownDelayEnv} {
		if inv.LookupEnv == nil {
			break
		}
		if v, ok := inv.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// DriverRootBin is the directory of a simulated driver root that holds nvidia-imex and
// nvidia-imex-ctl.
const DriverRootBin = "usr/bin"

// DriverRootLib is the directory of a simulated driver root that holds the NVML library, as
// the NVIDIA driver installs it on Debian and Ubuntu: the multiarch directory of this machine.
func DriverRootLib() string {
	if runtime.GOARCH == "arm64" {
		return "usr/lib/aarch64-linux-gnu"
	}
	return "usr/lib/x86_64-linux-gnu"
}

// DriverFiles are what InstallDriverRoot installs.
type DriverFiles struct {
	// IMEXSim is the imex-sim binary, nvidia-imex and nvidia-imex-ctl.
	IMEXSim string
	// NVMLLibrary is the simulated NVML library (nvmlsim.BuildLibrary), libnvidia-ml.so.1.
	NVMLLibrary string
	// DriverVersion is the node's driver version (nvmlsim.Node.Driver), which names the
	// library's file as the driver's own.
	DriverVersion string
}

// InstallDriverRoot lays out a simulated driver root at root, a node's directory (the node's
// "/", the chart's default nvidiaDriverRoot), as the NVIDIA driver lays out its own:
// nvidia-imex and nvidia-imex-ctl in usr/bin are hard links to (or copies of) the imex-sim binary, and
// DriverRootLib holds the simulated NVML library as libnvidia-ml.so.<driver version> (a hard
// link to f.NVMLLibrary, or a copy where none can be made) with the relative link
// libnvidia-ml.so.1 to it. The kubelet plugin finds them there as it finds the real ones on a
// GPU node: it loads the library by its full path for its own discovery, and hands all three to
// daemon containers through the daemon claim's CDI mounts. Installing again (a restarted
// simulated kubelet) replaces them, and removes a library of another driver version.
func InstallDriverRoot(root string, f DriverFiles) error {
	if f.IMEXSim == "" || f.NVMLLibrary == "" || f.DriverVersion == "" {
		return fmt.Errorf("simulated driver root %s: the imex-sim binary, the NVML library and the driver version are all needed", root)
	}
	bin := filepath.Join(root, DriverRootBin)
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	// Hard links (or copies), not symbolic links: the plugin resolves a driver root's links
	// inside the root, as a real node's driver container needs, and the imex-sim binary lies
	// outside it.
	for _, name := range []string{"nvidia-imex", "nvidia-imex-ctl"} {
		p := filepath.Join(bin, name)
		_ = os.Remove(p)
		if err := os.Link(f.IMEXSim, p); err != nil {
			if err := copyFile(f.IMEXSim, p); err != nil {
				return fmt.Errorf("installing the simulated %s: %w", name, err)
			}
		}
	}
	return installNVML(filepath.Join(root, DriverRootLib()), f.NVMLLibrary, f.DriverVersion)
}

// installNVML puts the library into dir as libnvidia-ml.so.<version>, linked from
// libnvidia-ml.so.1, removing any other libnvidia-ml.so.* there.
func installNVML(dir, lib, version string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(dir, "libnvidia-ml.so.*"))
	if err != nil {
		return err
	}
	for _, p := range old {
		if err := os.Remove(p); err != nil {
			return err
		}
	}
	name := "libnvidia-ml.so." + version
	target := filepath.Join(dir, name)
	if err := os.Link(lib, target); err != nil {
		if err := copyFile(lib, target); err != nil {
			return fmt.Errorf("installing the simulated NVML library: %w", err)
		}
	}
	return os.Symlink(name, filepath.Join(dir, nvmlsim.LibrarySoname))
}

// copyFile copies src to dst, executable as a shared library is.
func copyFile(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		return errors.Join(err, out.Close())
	}
	return out.Close()
}

// Paths of a node's host-managed IMEX (nvidia-imex run as a host service, configured by the
// node's administrator), below its node directory.
const (
	// HostIMEXConfigPath is the host service's imexd config.
	HostIMEXConfigPath = "/etc/nvidia-imex/config.cfg"
	// HostIMEXNodesConfigPath is its node list: the rack's addresses, one a line.
	HostIMEXNodesConfigPath = imex.DefaultNodesConfigPath
	// HostIMEXSocketPath is the Unix domain socket of its command service. The kubelet plugin is
	// told this path (--imex-host-socket-path) and joins it onto its driver root, which on a
	// simulated node is the node directory.
	HostIMEXSocketPath = "/etc/nvidia-imex/imex_ctrl.sock"
)

// StartHostIMEX starts a node's host-managed IMEX, as systemd starts nvidia-imex on a GPU node
// whose administrator configured the rack: it writes HostIMEXConfigPath and
// HostIMEXNodesConfigPath below nodeDir (the node's "/") and runs the simulated IMEX on them in
// this process. It listens for peers on self at the default server port and serves its command
// service on the Unix domain socket HostIMEXSocketPath below nodeDir; the node list holds self
// and peers, sorted, so that every node of a rack gets the same one. The files name absolute
// host paths, since the simulated IMEX runs on this machine's filesystem; the socket path must
// stay within the Unix domain socket limit (107 bytes), so nodeDir must be short.
//
// The service runs with the node directory as its stand-in (imexsim.NodeDirEnv), so it holds
// the node's IMEX session: a container's IMEX on the node fails with NV_ERR_IN_USE, as on a GPU
// node whose nvidia-imex.service runs.
//
// stop stops the service and waits for it, or for its context; it may be called more than once.
// A run that crashed (imexsim.Crash) is not restarted.
func StartHostIMEX(nodeDir string, self netip.Addr, peers []netip.Addr, log logr.Logger) (stop func(context.Context) error, err error) {
	root, err := filepath.Abs(nodeDir)
	if err != nil {
		return nil, fmt.Errorf("host IMEX on node directory %s: %w", nodeDir, err)
	}
	if err := writeHostIMEX(root, self, peers); err != nil {
		return nil, err
	}
	// Enabled, as `systemctl enable --now nvidia-imex` leaves it: the unit's link, which the
	// kubelet plugin looks for in the driver root to name the session's holder. Stopping the
	// service disables it again.
	unit := filepath.Join(root, HostIMEXUnitLink)
	if err := os.MkdirAll(filepath.Dir(unit), 0o755); err != nil {
		return nil, err
	}
	_ = os.Remove(unit)
	if err := os.Symlink("/usr/lib/systemd/system/nvidia-imex.service", unit); err != nil {
		return nil, err
	}
	stopService, err := runHostIMEX(root, self, log)
	if err != nil {
		_ = os.Remove(unit)
		return nil, err
	}
	return func(ctx context.Context) error {
		err := stopService(ctx)
		if rmErr := os.Remove(unit); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) && err == nil {
			err = rmErr
		}
		return err
	}, nil
}

// HostIMEXUnitLink is where an enabled nvidia-imex service's systemd unit link lies, below the
// node directory.
const HostIMEXUnitLink = "/etc/systemd/system/multi-user.target.wants/nvidia-imex.service"

// writeHostIMEX writes the host service's config and node list below root.
func writeHostIMEX(root string, self netip.Addr, peers []netip.Addr) error {
	nodes, err := hostIMEXNodes(self, peers)
	if err != nil {
		return fmt.Errorf("host IMEX on node directory %s: %w", root, err)
	}
	nodesPath := filepath.Join(root, HostIMEXNodesConfigPath)
	config := fmt.Sprintf("# IMEX host service of a simulated node\n"+
		"DAEMONIZE=0\nBIND_INTERFACE_IP=%s\nSERVER_PORT=%d\nIMEX_NODE_CONFIG_FILE=%s\n"+
		"IMEX_CMD_ENABLED=1\nIMEX_CMD_UNIX_DOMAIN_PATH=%s\n",
		self, imex.DefaultServerPort, nodesPath, filepath.Join(root, HostIMEXSocketPath))
	for _, f := range []struct {
		path    string
		content []byte
	}{
		{nodesPath, nodes},
		{filepath.Join(root, HostIMEXConfigPath), []byte(config)},
	} {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			return fmt.Errorf("writing host IMEX config: %w", err)
		}
		if err := os.WriteFile(f.path, f.content, 0o644); err != nil {
			return fmt.Errorf("writing host IMEX config: %w", err)
		}
	}
	return nil
}

// hostIMEXNodes renders the node list: self and peers, sorted, one address a line.
func hostIMEXNodes(self netip.Addr, peers []netip.Addr) ([]byte, error) {
	if !self.IsValid() {
		return nil, fmt.Errorf("this node's address is not set")
	}
	all := append([]netip.Addr{self}, peers...)
	slices.SortFunc(all, netip.Addr.Compare)
	var b bytes.Buffer
	for i, addr := range all {
		switch {
		case !addr.IsValid():
			return nil, fmt.Errorf("a peer address is not set")
		case i > 0 && addr == all[i-1]:
			return nil, fmt.Errorf("address %s is listed twice (peers must not repeat each other or this node)", addr)
		}
		b.WriteString(addr.String() + "\n")
	}
	return b.Bytes(), nil
}

// HostIMEXRestartDelay is how long the host service waits before starting IMEX again after a
// run failed, as a systemd unit with Restart=on-failure does (RestartSec).
const HostIMEXRestartDelay = 2 * time.Second

// runHostIMEX starts the simulated IMEX on the host service's files below root, as they are,
// on the node whose directory is root and whose address is self, and supervises it as systemd
// supervises a service with Restart=on-failure: a run that fails (another IMEX held the node's
// session, a crash) is started again after HostIMEXRestartDelay, until stop. A first start that
// fails on its configuration is returned.
func runHostIMEX(root string, self netip.Addr, log logr.Logger) (func(context.Context) error, error) {
	log = log.WithName("host-imex")
	sim := imexsim.New(imex.Options{
		ConfigPath: filepath.Join(root, HostIMEXConfigPath),
		HostsPath:  filepath.Join(root, "/etc/hosts"),
		Env:        []string{imexsim.NodeDirEnv + "=" + root, imexsim.LocalAddrsEnv + "=" + self.String()},
		Log:        log,
	})
	exited, err := sim.Start(context.Background())
	if err != nil {
		return nil, fmt.Errorf("host IMEX on node directory %s: %w", root, err)
	}
	var mu sync.Mutex
	stopping := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stopping:
				return
			case err := <-exited:
				if err == nil {
					return // stopped
				}
				log.Info("Host IMEX failed; the service starts it again", "after", HostIMEXRestartDelay.String(), "err", err.Error())
			}
			for {
				select {
				case <-stopping:
					return
				case <-time.After(HostIMEXRestartDelay):
				}
				// Under mu: a stop either comes before (no start) or after (it stops this run).
				mu.Lock()
				select {
				case <-stopping:
					mu.Unlock()
					return
				default:
				}
				exited, err = sim.Start(context.Background())
				mu.Unlock()
				if err == nil {
					break
				}
				log.Info("Starting host IMEX failed; trying again", "after", HostIMEXRestartDelay.String(), "err", err.Error())
			}
		}
	}()
	var once sync.Once
	return func(ctx context.Context) error {
		mu.Lock()
		once.Do(func() { close(stopping) })
		mu.Unlock()
		err := sim.Stop(ctx)
		select {
		case <-done:
		case <-ctx.Done():
		}
		return err
	}, nil
}

// RunPlugin runs the kubelet plugin as a process on the simulated node (Plugin): the simulated
// image's cdplane-kubelet-plugin binary, which links the real NVML backend, calls it.
func RunPlugin(ctx context.Context, inv component.Invocation) error {
	host, err := Plugin(inv)
	if err != nil {
		return err
	}
	return kubeletplugin.Run(ctx, inv, host)
}

// RunPluginInProcess runs the kubelet plugin in the simulated kubelet's process, with the Go
// stand-in for NVML (InProcessPlugin says why): the in-process runner calls it.
func RunPluginInProcess(ctx context.Context, inv component.Invocation) error {
	host, err := InProcessPlugin(inv)
	if err != nil {
		return err
	}
	return kubeletplugin.Run(ctx, inv, host)
}
