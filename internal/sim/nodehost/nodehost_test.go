package nodehost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"

	"cdplane/internal/component"
	"cdplane/internal/imex"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/nvml"
	"cdplane/internal/sim/imexsim"
	"cdplane/internal/sim/nvmlsim"
	"cdplane/internal/testutil"
)

func hostOf(t *testing.T, dir string) component.Invocation {
	t.Helper()
	return component.Invocation{LookupEnv: func(k string) (string, bool) { return dir, k == NodeDirEnv }}
}

// A plugin run in-process on a simulated node discovers from the node's spec file each time, so
// a fabric that changes while the plugin runs is seen; the driver's /proc files are the node's.
func TestInProcessPluginHost(t *testing.T) {
	dir := t.TempDir()
	spec := nvmlsim.Rack(0, "n1")
	if err := WriteNode(dir, spec); err != nil {
		t.Fatal(err)
	}
	host, err := InProcessPlugin(hostOf(t, dir))
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
}

// A plugin process on a simulated node gets the node's /proc files and no NVML stand-in: it
// loads the simulated library from its driver root, as on a GPU node.
func TestPluginHost(t *testing.T) {
	dir := t.TempDir()
	if err := WriteNode(dir, nvmlsim.Rack(0, "n1")); err != nil {
		t.Fatal(err)
	}
	host, err := Plugin(hostOf(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	if host.Discoverer != nil {
		t.Errorf("a plugin process got a Discoverer (%T); it must load NVML itself", host.Discoverer)
	}
	if data, err := host.ReadHostFile(ProcDevicesPath); err != nil || len(data) == 0 {
		t.Errorf("the node's /proc/devices: %q, %v", data, err)
	}
}

func TestPluginHostNeedsASimulatedNode(t *testing.T) {
	noNode := component.Invocation{LookupEnv: func(string) (string, bool) { return "", false }}
	if _, err := Plugin(noNode); err == nil {
		t.Error("a plugin host without a node directory")
	}
	if _, err := InProcessPlugin(noNode); err == nil {
		t.Error("an in-process plugin host without a node directory")
	}
	if _, err := InProcessPlugin(hostOf(t, t.TempDir())); err == nil {
		t.Error("an in-process plugin host without an NVML spec")
	}
}

// WriteNode writes the node's NVML in both forms, and rewriting it replaces both.
func TestWriteNodeNVML(t *testing.T) {
	dir := t.TempDir()
	spec := nvmlsim.Rack(0, "n1")
	for _, state := range []nvml.FabricState{nvml.FabricStateInProgress, nvml.FabricStateCompleted} {
		spec.Fabric.State = state
		if err := WriteNode(dir, spec); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(dir, NVMLSpecPath))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := nvmlsim.Parse(data); err != nil || !cmp.Equal(got, spec) {
			t.Errorf("JSON spec %s (%v), want %+v", data, err, spec)
		}
		conf, err := os.ReadFile(filepath.Join(dir, NVMLConfPath))
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := nvmlsim.RenderConf(spec); !bytes.Equal(conf, want) {
			t.Errorf("library spec:\n%s\nwant:\n%s", conf, want)
		}
	}
	if err := WriteNode(dir, nvmlsim.Node{Node: "n1", GPUs: nvmlsim.MaxGPUs + 1}); err == nil {
		t.Error("WriteNode wrote an invalid spec")
	}
}

// A node's driver root holds the simulated IMEX and NVML library where the kubelet plugin
// looks for the real ones, the library named by the node's driver version as the driver names
// its own; installing again (a restarted simulated kubelet) replaces them.
func TestInstallDriverRoot(t *testing.T) {
	bin := t.TempDir()
	root, imexSim, lib := t.TempDir(), filepath.Join(bin, "imex-sim"), filepath.Join(bin, nvmlsim.LibraryFile)
	for _, p := range []string{imexSim, lib} {
		if err := os.WriteFile(p, []byte(p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	libDir := filepath.Join(root, DriverRootLib())
	for _, version := range []string{"570.133.20", nvmlsim.DefaultDriverVersion, nvmlsim.DefaultDriverVersion} {
		if err := InstallDriverRoot(root, DriverFiles{IMEXSim: imexSim, NVMLLibrary: lib, DriverVersion: version}); err != nil {
			t.Fatal(err)
		}
	}
	// Inside the root, as regular files: the plugin follows a root's links inside the root.
	want, err := os.Stat(imexSim)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"usr/bin/nvidia-imex", "usr/bin/nvidia-imex-ctl"} {
		fi, err := os.Lstat(filepath.Join(root, name))
		if err != nil || !fi.Mode().IsRegular() || !os.SameFile(fi, want) {
			t.Errorf("%s: %v, %v; want a hard link to %s", name, fi, err, imexSim)
		}
	}
	versioned := "libnvidia-ml.so." + nvmlsim.DefaultDriverVersion
	if target, err := os.Readlink(filepath.Join(libDir, "libnvidia-ml.so.1")); err != nil || target != versioned {
		t.Errorf("libnvidia-ml.so.1 links to %q (%v), want %s", target, err, versioned)
	}
	if data, err := os.ReadFile(filepath.Join(libDir, "libnvidia-ml.so.1")); err != nil || string(data) != lib {
		t.Errorf("the installed library holds %q (%v), want the built one", data, err)
	}
	entries, err := os.ReadDir(libDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"libnvidia-ml.so.1", versioned}; !slices.Equal(names, want) {
		t.Errorf("%s holds %q, want %q (the other driver's library removed)", libDir, names, want)
	}
	if err := InstallDriverRoot(root, DriverFiles{IMEXSim: imexSim}); err == nil {
		t.Error("a driver root without NVML library or version")
	}
}

// waitTimeout bounds every wait for state; generous because the test machine may be busy.
const waitTimeout = 30 * time.Second

// eventually polls cond until it holds or waitTimeout passes; cond returns a description of
// what it saw, for the failure message.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last seen: %s", waitTimeout, what, seen)
		}
		<-tick.C
	}
}

func withTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

func testLogger(t *testing.T) logr.Logger {
	return funcr.New(func(prefix, args string) { t.Log(prefix, args) }, funcr.Options{Verbosity: 1})
}

// shortNodeDir makes a node directory under /tmp, whose socket path stays far below the Unix
// domain socket limit (t.TempDir's hold the test's name), and removes it when the test ends.
func shortNodeDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "nh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// startHostIMEX starts a node's host-managed IMEX and stops it when the test ends.
func startHostIMEX(t *testing.T, nodeDir string, self netip.Addr, peers ...netip.Addr) func(context.Context) error {
	t.Helper()
	stop, err := StartHostIMEX(nodeDir, self, peers, testLogger(t))
	if err != nil {
		t.Fatalf("StartHostIMEX(%s): %v", self, err)
	}
	t.Cleanup(func() {
		if err := stop(context.Background()); err != nil {
			t.Errorf("stopping the host IMEX on %s: %v", self, err)
		}
	})
	return stop
}

// Two nodes of a rack run IMEX as a host service on 127.0.0.51 and 127.0.0.52: each is
// configured as an administrator configures it, answers the readiness query that the kubelet
// plugin runs on the socket below its driver root (the node directory), and connects to the
// other; stopping one removes its socket, and a restart whose node list is gone fails naming it.
func TestHostIMEX(t *testing.T) {
	a, b := netip.MustParseAddr("127.0.0.51"), netip.MustParseAddr("127.0.0.52")
	dirs := map[netip.Addr]string{a: shortNodeDir(t), b: shortNodeDir(t)}
	peerOf := map[netip.Addr]netip.Addr{a: b, b: a}
	stops := map[netip.Addr]func(context.Context) error{}
	for _, self := range []netip.Addr{a, b} {
		stops[self] = startHostIMEX(t, dirs[self], self, peerOf[self])
	}

	dir := dirs[a]
	cfg, err := imex.ReadIMEXConfig(filepath.Join(dir, HostIMEXConfigPath))
	if err != nil {
		t.Fatal(err)
	}
	want := imex.DaemonConfig{
		BindIP:          a,
		ServerPort:      imex.DefaultServerPort,
		NodesConfigPath: filepath.Join(dir, HostIMEXNodesConfigPath),
		CmdEnabled:      true,
		CmdUnixPath:     filepath.Join(dir, HostIMEXSocketPath),
	}
	if diff := cmp.Diff(want, cfg, cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
		t.Errorf("host IMEX config (-want +got):\n%s", diff)
	}
	for _, self := range []netip.Addr{a, b} {
		nodes, err := os.ReadFile(filepath.Join(dirs[self], HostIMEXNodesConfigPath))
		if want := "127.0.0.51\n127.0.0.52\n"; err != nil || string(nodes) != want {
			t.Errorf("node list of %s: %q, %v; want %q, the same on every node of the rack", self, nodes, err, want)
		}
	}

	for _, self := range []netip.Addr{a, b} {
		socket := filepath.Join(dirs[self], HostIMEXSocketPath)
		// IMEX answers nothing during its start-up checks, as the real one.
		eventually(t, "the host IMEX of "+self.String()+" to answer READY", func() (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := imexsim.ReadyUnix(ctx, socket); err != nil {
				return false, err.Error()
			}
			return true, ""
		})
		// What the kubelet plugin runs: the driver root's nvidia-imex-ctl -q --u=SOCKET.
		var stdout, stderr bytes.Buffer
		if code := imexsim.Main([]string{"-q", "--u=" + socket}, &stdout, &stderr); code != 0 || stdout.String() != "READY\n" {
			t.Errorf("nvidia-imex-ctl -q --u=%s: status %d, stdout %q, stderr %q; want READY", socket, code, &stdout, &stderr)
		}
	}
	connected := func(self netip.Addr, want ...netip.Addr) func() (bool, string) {
		return func() (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := imexsim.QueryUnix(ctx, filepath.Join(dirs[self], HostIMEXSocketPath))
			if err != nil {
				return false, err.Error()
			}
			var wantS []string
			for _, w := range want {
				wantS = append(wantS, w.String())
			}
			ok := slices.Equal(st.Connected, wantS) && slices.Equal(st.Inbound, wantS)
			return ok, fmt.Sprintf("%s: connected %v, inbound %v", self, st.Connected, st.Inbound)
		}
	}
	eventually(t, "both nodes to connect to each other", func() (bool, string) {
		okA, seenA := connected(a, b)()
		okB, seenB := connected(b, a)()
		return okA && okB, seenA + "; " + seenB
	})

	ctx := withTimeout(t)
	socket := filepath.Join(dir, HostIMEXSocketPath)
	for range 2 {
		if err := stops[a](ctx); err != nil {
			t.Fatalf("stopping the host IMEX on %s: %v", a, err)
		}
	}
	if fi, err := os.Lstat(socket); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s after stop: %v, %v; want it removed", socket, fi, err)
	}
	if err := imexsim.ReadyUnix(withTimeout(t), socket); err == nil || !strings.Contains(err.Error(), socket) {
		t.Errorf("readiness query after stop: %v, want an error naming %s", err, socket)
	}
	eventually(t, "the other node to lose the stopped one", connected(b))

	nodesPath := filepath.Join(dir, HostIMEXNodesConfigPath)
	if err := os.Remove(nodesPath); err != nil {
		t.Fatal(err)
	}
	if stop, err := runHostIMEX(dir, a, testLogger(t)); err == nil || !strings.Contains(err.Error(), nodesPath) {
		if stop != nil {
			_ = stop(withTimeout(t))
		}
		t.Errorf("restart without the node list: %v, want an error naming %s", err, nodesPath)
	}
}

// StartHostIMEX refuses a node without an address, a node list that repeats an address, and a
// node directory it cannot write into, saying which; it starts nothing then.
func TestStartHostIMEXRefuses(t *testing.T) {
	self := netip.MustParseAddr("127.0.0.51")
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		nodeDir string
		self    netip.Addr
		peers   []netip.Addr
		wantErr string
	}{
		"no self address": {
			peers:   []netip.Addr{netip.MustParseAddr("127.0.0.52")},
			wantErr: "this node's address is not set",
		},
		"self among the peers": {
			self:    self,
			peers:   []netip.Addr{netip.MustParseAddr("127.0.0.52"), self},
			wantErr: "address 127.0.0.51 is listed twice",
		},
		"a peer without an address": {
			self:    self,
			peers:   []netip.Addr{{}},
			wantErr: "a peer address is not set",
		},
		"node directory is a file": {
			nodeDir: notADir,
			self:    self,
			wantErr: "not a directory",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := tc.nodeDir
			if dir == "" {
				dir = shortNodeDir(t)
			}
			stop, err := StartHostIMEX(dir, tc.self, tc.peers, testLogger(t))
			if err == nil {
				_ = stop(withTimeout(t))
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("StartHostIMEX: %v, want an error naming %s: %s", err, dir, tc.wantErr)
			}
			if fi, err := os.Lstat(filepath.Join(dir, HostIMEXSocketPath)); err == nil {
				t.Errorf("a refused start left a socket: %v", fi.Mode())
			}
		})
	}
}

// The node's driver version file is in the real one's format: the kubelet plugin reads the
// spec's driver version from it, DefaultDriverVersion when the spec names none.
func TestWriteNodeDriverVersion(t *testing.T) {
	cases := map[string]struct {
		version string
		want    string
	}{
		"default":       {want: nvmlsim.DefaultDriverVersion},
		"an old driver": {version: "565.57.01", want: "565.57.01"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			spec := nvmlsim.Rack(0, "n1")
			spec.DriverVersion = tc.version
			if err := WriteNode(dir, spec); err != nil {
				t.Fatal(err)
			}
			host, err := Plugin(hostOf(t, dir))
			if err != nil {
				t.Fatal(err)
			}
			data, err := host.ReadHostFile(kubeletplugin.DriverVersionFile)
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := kubeletplugin.KernelDriverVersion(data); !ok || got != tc.want {
				t.Errorf("driver version from %q: %q, %v; want %q", data, got, ok, tc.want)
			}
		})
	}
}

// An in-process daemon's IMEX gets the stand-ins the simulated kubelet set in the daemon
// container's environment, and nothing else of it.
func TestStandInEnv(t *testing.T) {
	cases := map[string]struct {
		env  map[string]string
		want []string
	}{
		"none": {env: map[string]string{"PATH": "/bin"}},
		"all": {
			env: map[string]string{
				"PATH": "/bin", imexsim.NodeDirEnv: "/n", imexsim.LocalAddrsEnv: "127.128.0.5",
				imexsim.ResolvConfEnv: "/p/resolv.conf", imexsim.HostsFileEnv: "/p/etc-hosts", imexsim.LinkRetryMaxEnv: "5s",
			},
			want: []string{imexsim.NodeDirEnv + "=/n", imexsim.LocalAddrsEnv + "=127.128.0.5",
				imexsim.ResolvConfEnv + "=/p/resolv.conf", imexsim.HostsFileEnv + "=/p/etc-hosts", imexsim.LinkRetryMaxEnv + "=5s"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			inv := component.Invocation{LookupEnv: func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }}
			if diff := cmp.Diff(tc.want, standInEnv(inv)); diff != "" {
				t.Errorf("stand-ins (-want +got):\n%s", diff)
			}
		})
	}
}

// The host IMEX holds the node's IMEX session: an IMEX that a daemon container on the node
// starts ends with NV_ERR_IN_USE.
func TestHostIMEXHoldsTheSession(t *testing.T) {
	nodeDir := shortNodeDir(t)
	self := netip.MustParseAddr("127.0.0.55")
	startHostIMEX(t, nodeDir, self)
	eventually(t, "the host IMEX to answer READY", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := imexsim.ReadyUnix(ctx, filepath.Join(nodeDir, HostIMEXSocketPath))
		return err == nil, fmt.Sprint(err)
	})

	// A container's IMEX on the same node, on its pod address.
	dir := t.TempDir()
	nodes, config := filepath.Join(dir, "nodes.cfg"), filepath.Join(dir, "config.cfg")
	for path, content := range map[string]string{
		nodes:  "127.128.0.55\n",
		config: "BIND_INTERFACE_IP=\nSERVER_PORT=0\nIMEX_NODE_CONFIG_FILE=" + nodes + "\n",
	} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	host := InProcessDaemon(component.Invocation{LookupEnv: func(k string) (string, bool) {
		v, ok := map[string]string{NodeDirEnv: nodeDir, imexsim.LocalAddrsEnv: "127.128.0.55"}[k]
		return v, ok
	}})
	container := host.NewIMEX(imex.Options{ConfigPath: config, HostsPath: filepath.Join(dir, "hosts"), Log: testLogger(t)})
	exited, err := container.Start(withTimeout(t))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = container.Stop(context.Background()) })
	select {
	case err := <-exited:
		if !errors.Is(err, imexsim.ErrSessionInUse) || !strings.Contains(err.Error(), "NV_ERR_IN_USE") {
			t.Errorf("the container's IMEX ended with %v, want ErrSessionInUse naming NV_ERR_IN_USE", err)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("timed out after %s waiting for the container's IMEX to end", waitTimeout)
	}
}

// The host service starts while another IMEX holds the node's session (a daemon's, not yet
// gone): its run fails with NV_ERR_IN_USE, and the service starts it again, as systemd does
// with Restart=on-failure, until it holds the session once the other IMEX stopped.
func TestHostIMEXRestartsAfterFailing(t *testing.T) {
	nodeDir := shortNodeDir(t)
	holderDir := t.TempDir()
	holderAddr := "127.0.0.61"
	nodes := filepath.Join(holderDir, "nodes.cfg")
	cfg := filepath.Join(holderDir, "imexd.cfg")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(nodes, []byte(holderAddr+"\n"), 0o644))
	must(os.WriteFile(cfg, []byte("DAEMONIZE=0\nBIND_INTERFACE_IP="+holderAddr+"\nSERVER_PORT=50000\nIMEX_NODE_CONFIG_FILE="+nodes+
		"\nIMEX_CMD_ENABLED=1\nIMEX_CMD_BIND_INTERFACE_IP="+holderAddr+"\nIMEX_CMD_PORT=50005\n"), 0o644))
	holder := imexsim.New(imex.Options{ConfigPath: cfg, HostsPath: filepath.Join(holderDir, "hosts"),
		Env: []string{imexsim.NodeDirEnv + "=" + nodeDir}, Log: testLogger(t).WithName("holder")})
	holderEnded, err := holder.Start(context.Background())
	must(err)
	poll := func(what string, cond func() bool) {
		t.Helper()
		testutil.Eventually(t, 60*time.Second, what, func() (bool, error) { return cond(), nil })
	}
	// The holder takes the session at the end of its start-up phase, then answers READY.
	poll("the holder READY, holding the session", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return imexsim.Ready(ctx, cfg) == nil
	})

	var mu sync.Mutex
	failures := 0
	logger := funcr.New(func(prefix, args string) {
		t.Log(prefix, args)
		if strings.Contains(args, "Host IMEX failed; the service starts it again") {
			mu.Lock()
			failures++
			mu.Unlock()
		}
	}, funcr.Options{Verbosity: 1})
	stop, err := StartHostIMEX(nodeDir, netip.MustParseAddr("127.0.0.62"), nil, logger)
	must(err)
	t.Cleanup(func() { _ = stop(context.Background()) })
	socket := filepath.Join(nodeDir, HostIMEXSocketPath)
	ready := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return imexsim.ReadyUnix(ctx, socket)
	}
	// Not READY while the holder runs: its runs fail (twice, seen in its log) and are started
	// again.
	poll("two failed runs of the host IMEX", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return failures >= 2
	})
	if err := ready(); err == nil {
		t.Fatal("the host IMEX is READY while another IMEX holds the node's session")
	}
	must(holder.Stop(context.Background()))
	if err := <-holderEnded; err != nil {
		t.Fatalf("the holder ended with %v, want a clean stop", err)
	}
	poll("the host IMEX READY after the other IMEX stopped", func() bool { return ready() == nil })
}
