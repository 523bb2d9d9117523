package sim

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"cdplane/internal/atomicfile"
	"cdplane/internal/component"
	"cdplane/internal/daemon"
	"cdplane/internal/sim/imexsim"
	"cdplane/internal/sim/kubelet"
	"cdplane/internal/sim/nodehost"
	"cdplane/internal/sim/nvmlsim"
)

// RunKubelet is the background process `cdplane sim kubelet`: the simulated kubelet for every
// node of the sim in stateDir. Pods of image repository "cdplane" run the sim's binaries as
// processes, or, in a sim started in-process, the kubelet plugin and the daemon run as
// instances in this process (the controller stays a process); every other image runs the
// no-op container. It returns when ctx ends.
//
// shard and shards split the nodes among several such processes (shards contiguous ranges of
// the node list); each takes its own share of the pod address range.
func RunKubelet(ctx context.Context, stateDir string, shard, shards int) error {
	st, err := Load(stateDir)
	if err != nil {
		return err
	}
	if st == nil {
		return fmt.Errorf("no simulated cluster in %s", stateDir)
	}
	if shards < 1 || shards > maxShards || shard < 0 || shard >= shards {
		return fmt.Errorf("shard %d of %d: want 0 <= shard < shards <= %d", shard, shards, maxShards)
	}
	nodes := shardNodes(st.Nodes, shard, shards)
	// Before any API client of this process exists: client-go reads it as it builds a transport.
	st.applyHTTP2PingTimeout()
	if err := lowerPriority("/proc/self/autogroup"); err != nil {
		klog.Background().Error(err, "Lowering the simulated kubelet's CPU priority; it competes with the control plane at equal weight", "nice", KubeletNice)
	}
	if os.Getenv(PprofEnv) != "" {
		if err := servePprof(ctx, filepath.Join(stateDir, "logs", fmt.Sprintf("sim-kubelet-%d.pprof-address", shard))); err != nil {
			return err
		}
	}
	go recordIMEXDNSLookups(ctx, IMEXDNSLookupsFile(stateDir, shard))
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeletKubeconfigFor(st, stateDir, shard))
	if err != nil {
		return err
	}
	runner, err := router(st, cfg)
	if err != nil {
		return err
	}
	specs := make([]kubelet.NodeSpec, 0, len(nodes))
	for _, n := range nodes {
		specs = append(specs, kubelet.NodeSpec{Name: n.Name, Labels: n.Labels, Capacity: capacity(), InternalIP: n.InternalIP})
	}
	kcfg := kubelet.Config{
		HostEnv:    st.hostEnv,
		RESTConfig: cfg,
		StateDir:   stateDir,
		Nodes:      specs,
		Runner:     runner,
		PodCIDR:    podCIDR(shard),
	}
	st.kubeletTimings(&kcfg)
	k, err := kubelet.New(kcfg)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := nodehost.WriteNode(k.NodeDir(n.Name), n.NVML); err != nil {
			return err
		}
		if err := nodehost.WriteDeviceNodes(k.NodeDir(n.Name)); err != nil {
			return fmt.Errorf("device nodes of node %s: %w", n.Name, err)
		}
		// The node's driver root (its "/") holds the simulated IMEX as nvidia-imex and
		// nvidia-imex-ctl and the simulated NVML as libnvidia-ml.so.1, which the kubelet plugin
		// loads for its own discovery and mounts into daemon containers, as on a GPU node.
		if err := nodehost.InstallDriverRoot(k.NodeDir(n.Name), nodehost.DriverFiles{
			IMEXSim:       filepath.Join(st.BinDir, "imex-sim"),
			NVMLLibrary:   filepath.Join(st.BinDir, nvmlsim.LibraryFile),
			DriverVersion: n.NVML.Driver(),
		}); err != nil {
			return fmt.Errorf("simulated driver root of node %s: %w", n.Name, err)
		}
	}
	if st.HostManaged() {
		stop, err := startHostIMEX(st.Nodes, nodes, k.NodeDir)
		defer stop()
		if err != nil {
			return err
		}
	}
	return k.Run(ctx)
}

// HTTP2PingTimeoutEnv is client-go's setting of how long a client waits for the answer to an
// HTTP/2 health check, in seconds.
const HTTP2PingTimeoutEnv = "HTTP2_PING_TIMEOUT_SECONDS"

// applyHTTP2PingTimeout sets HTTP2PingTimeoutEnv in this process to the sim's HTTP2PingTimeout,
// unless it is zero or the variable is already set (the user's choice wins).
func (st *State) applyHTTP2PingTimeout() {
	d := st.HTTP2PingTimeout.Duration
	if d <= 0 || os.Getenv(HTTP2PingTimeoutEnv) != "" {
		return
	}
	_ = os.Setenv(HTTP2PingTimeoutEnv, strconv.Itoa(int(d.Seconds())))
}

// startHostIMEX starts the simulated nvidia-imex host service of each node of mine that has a
// fabric, configured as an administrator configures a rack: its node list holds the rack's
// nodes with a fabric (all is every node of the sim, mine this process's share). The returned
// stop stops those started.
func startHostIMEX(all, mine []Node, nodeDir func(string) string) (stop func(), err error) {
	var stops []func(context.Context) error
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, s := range stops {
			_ = s(ctx)
		}
	}
	rack := map[int][]netip.Addr{}
	for _, n := range all {
		if !n.NVML.Fabric.NoFabric {
			rack[n.Rack] = append(rack[n.Rack], netip.MustParseAddr(n.InternalIP))
		}
	}
	for _, n := range mine {
		if n.NVML.Fabric.NoFabric {
			continue
		}
		self := netip.MustParseAddr(n.InternalIP)
		peers := slices.DeleteFunc(slices.Clone(rack[n.Rack]), func(a netip.Addr) bool { return a == self })
		s, err := nodehost.StartHostIMEX(nodeDir(n.Name), self, peers, klog.Background().WithValues("node", n.Name))
		if err != nil {
			return stop, fmt.Errorf("host IMEX of node %s: %w", n.Name, err)
		}
		stops = append(stops, s)
	}
	return stop, nil
}

// maxShards is how many simulated-kubelet processes may split the nodes: each takes a /12 of
// the pod range 127.128.0.0/9.
const maxShards = 8

// hostEnv is what the simulated host adds to every container's environment: the node directory
// and, in a large sim, the simulated IMEX's link retry cap.
func (st *State) hostEnv(_, nodeDir string) []kubelet.EnvVar {
	env := []kubelet.EnvVar{{Name: nodehost.NodeDirEnv, Value: nodeDir}}
	if d := st.IMEXLinkRetryMax.Duration; d > 0 {
		env = append(env, kubelet.EnvVar{Name: imexsim.LinkRetryMaxEnv, Value: d.String()})
	}
	return env
}

// kubeletTimings gives c the sim's node Lease timing and probe floors (liveness kills
// included); zero ones (state of an older sim) leave the kubelet's defaults.
func (st *State) kubeletTimings(c *kubelet.Config) {
	c.LeaseRenewInterval = st.NodeLeaseRenew.Duration
	c.LeaseDuration = 4 * st.NodeLeaseRenew.Duration
	c.MinProbePeriod = st.ProbePeriodFloor.Duration
	c.MinProbeTimeout = st.ProbeTimeoutFloor.Duration
	c.MinLivenessFailures = st.LivenessFailureFloor
}

// shardNodes is shard's contiguous share of nodes.
func shardNodes(nodes []Node, shard, shards int) []Node {
	return nodes[shard*len(nodes)/shards : (shard+1)*len(nodes)/shards]
}

// podCIDR is shard's share of kubelet.DefaultPodCIDR.
func podCIDR(shard int) string {
	return fmt.Sprintf("127.%d.0.0/12", 128+16*shard)
}

// router routes image "cdplane" to the sim's binaries, or to in-process instances of the plugin
// and the daemon. In-process instances share one REST mapper, built on the kubelet's connection
// cfg: discovery is the same for every identity, and a mapper per instance was an eighth of a
// simulated node's memory.
func router(st *State, cfg *rest.Config) (kubelet.Runner, error) {
	r := kubelet.NewProcessRouter(map[string]string{"cdplane": st.BinDir}, st.ImagesDir())
	if !st.InProcess {
		return r, nil
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("HTTP client for the shared REST mapper: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("shared REST mapper: %w", err)
	}
	// Instances log through loggers of their own; what the libraries log through the
	// controller-runtime logger goes to the kubelet's log.
	ctrl.SetLogger(klog.Background())
	raiseFileLimit()
	r.ByRepository["cdplane"] = &kubelet.InProcessRunner{
		Programs: map[string]kubelet.Program{
			// With the Go stand-in for NVML: one process cannot load a library per node.
			"cdplane-kubelet-plugin": program(mapper, nodehost.RunPluginInProcess),
			"cdplane-daemon": program(mapper, func(ctx context.Context, inv component.Invocation) error {
				return daemon.Run(ctx, inv, nodehost.InProcessDaemon(inv))
			}),
		},
		Fallback: r.ByRepository["cdplane"],
	}
	return r, nil
}

func program(mapper meta.RESTMapper, run func(context.Context, component.Invocation) error) kubelet.Program {
	return func(ctx context.Context, args []string, env func(string) (string, bool), out io.Writer) error {
		return run(ctx, component.Invocation{Args: args, LookupEnv: env, Stdout: out, Stderr: out, Mapper: mapper})
	}
}

// raiseFileLimit lifts the open-file limit as far as allowed: in-process, every node's plugin
// and daemon connections and every simulated IMEX peer link are this process's descriptors.
func raiseFileLimit() {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return
	}
	want := l
	want.Cur, want.Max = 1<<20, max(l.Max, 1<<20)
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) == nil {
		return
	}
	want.Cur, want.Max = l.Max, l.Max
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want)
}

// PprofEnv is the environment variable that, set for `sim up`, makes each simulated-kubelet
// process serve Go's profiles (net/http/pprof) on a free loopback port, written to
// <state>/logs/sim-kubelet-<i>.pprof-address.
const PprofEnv = "CDPLANE_SIM_PPROF"

func servePprof(ctx context.Context, addressFile string) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("pprof listener: %w", err)
	}
	if err := os.WriteFile(addressFile, []byte(l.Addr().String()+"\n"), 0o644); err != nil {
		_ = l.Close()
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return nil
}

// IMEXDNSLookupsFile is where simulated-kubelet process shard records how many simulated DNS
// lookups the in-process simulated IMEX daemons it runs made (imexsim.DNSLookups).
func IMEXDNSLookupsFile(stateDir string, shard int) string {
	return filepath.Join(stateDir, "logs", fmt.Sprintf("sim-kubelet-%d.imex-dns-lookups", shard))
}

// imexDNSRecordInterval is how often a simulated-kubelet process records the count.
const imexDNSRecordInterval = 2 * time.Second

// recordIMEXDNSLookups writes the process's count of simulated IMEX DNS lookups to path every
// imexDNSRecordInterval until ctx ends, and once more then.
func recordIMEXDNSLookups(ctx context.Context, path string) {
	write := func() { _ = atomicfile.Write(path, fmt.Appendf(nil, "%d\n", imexsim.DNSLookups()), 0o644) }
	tick := time.NewTicker(imexDNSRecordInterval)
	defer tick.Stop()
	for {
		write()
		select {
		case <-ctx.Done():
			write()
			return
		case <-tick.C:
		}
	}
}

// IMEXDNSLookups sums the simulated DNS lookups that the in-process simulated IMEX daemons of
// the sim's kubelet processes recorded (IMEXDNSLookupsFile): what real IMEX daemons would have
// sent to cluster DNS. Daemons run as processes (not in-process) are not counted here.
func IMEXDNSLookups(stateDir string) (int64, error) {
	files, err := filepath.Glob(filepath.Join(stateDir, "logs", "sim-kubelet-*.imex-dns-lookups"))
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return 0, err
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", f, err)
		}
		sum += n
	}
	return sum, nil
}
