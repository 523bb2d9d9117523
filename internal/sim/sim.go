package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"cdplane/internal/features"
	"cdplane/internal/lifecycle"
	"cdplane/internal/progress"
	"cdplane/internal/scheme"
	"cdplane/internal/sim/controlplane"
	"cdplane/internal/sim/kubelet"
	"cdplane/internal/sim/nvmlsim"
)

// stateFile records what `sim up` started, in the state directory.
const stateFile = "state.json"

// State is the record of a simulated cluster.
type State struct {
	Started      time.Time                 `json:"started"`
	Repo         string                    `json:"repo"`
	ControlPlane controlplane.ControlPlane `json:"controlPlane"`
	// Processes: the control plane's, then the simulated kubelet's, in start order.
	Processes  []controlplane.Process `json:"processes"`
	Nodes      []Node                 `json:"nodes"`
	Planes     []string               `json:"planes,omitempty"`
	BinDir     string                 `json:"binDir"`
	K8sBinDir  string                 `json:"k8sBinDir"`
	KubectlDir string                 `json:"kubectlDir"`
	// NumChannels is the channel devices each node publishes.
	NumChannels int `json:"numChannels"`
	// InProcess: the simulated kubelet runs the plugins and daemons in its own process.
	InProcess bool `json:"inProcess,omitempty"`
	// NodeLeaseRenew is how often each node renews its Lease (see nodeLeaseRenew); zero in
	// state written before it existed: the kubelet's default.
	NodeLeaseRenew metav1.Duration `json:"nodeLeaseRenew,omitzero"`
	// ProbePeriodFloor is the shortest period the simulated kubelet runs probes at (see
	// probePeriodFloor); zero: every probe as its spec says.
	ProbePeriodFloor metav1.Duration `json:"probePeriodFloor,omitzero"`
	// ProbeTimeoutFloor is the shortest timeout the simulated kubelet gives a probe (see
	// probeTimeoutFloor); zero: every probe as its spec says.
	ProbeTimeoutFloor metav1.Duration `json:"probeTimeoutFloor,omitzero"`
	// LivenessFailureFloor is the fewest consecutive failures of a liveness probe that make the
	// simulated kubelet kill its container (see livenessFailureFloor); zero: every probe as its
	// spec says.
	LivenessFailureFloor int32 `json:"livenessFailureFloor,omitempty"`
	// IMEXLinkRetryMax is the longest wait of a simulated IMEX between two attempts to reach a
	// peer (see imexLinkRetryMax); zero: the simulated IMEX's default.
	IMEXLinkRetryMax metav1.Duration `json:"imexLinkRetryMax,omitzero"`
	// HTTP2PingTimeout is how long the API clients of the simulated-kubelet processes (and of
	// the plugins and daemons they run in-process) wait for the answer to an HTTP/2 health
	// check before they drop the connection (see http2PingTimeout); zero: client-go's default.
	HTTP2PingTimeout metav1.Duration `json:"http2PingTimeout,omitzero"`
	// IMEXMode is the planes' IMEX mode; hostManaged: every node with a fabric runs a simulated
	// nvidia-imex host service (run by the simulated kubelet process). Empty: driverManaged.
	IMEXMode string `json:"imexMode,omitempty"`
	// KubeletIdentity: each simulated-kubelet process authenticates as its own user of
	// KubeletGroup (kubeletidentity.go); false in state written before: as the administrator.
	KubeletIdentity bool `json:"kubeletIdentity,omitempty"`
}

// HostManaged reports whether the sim's nodes run IMEX as a host service.
func (st *State) HostManaged() bool { return st.IMEXMode == string(features.IMEXHostManaged) }

// nodeLeaseRenew is how often each simulated node renews its Lease: a kubelet's 10 s up to
// 400 nodes, then longer so that the whole sim renews about 40 Leases a second. In a large sim
// the kubelet's 10 s made Lease updates a large share of the apiserver's requests on 2 cores
// and starved everything else (see docs/scale.md, "Design choices and what was measured"). The
// Lease lasts 4 renewals and kube-controller-manager marks a node NotReady after 5 (a kubelet's
// 40 s and 50 s at 10 s), so a large sim notices a stopped node later: after five of its longer
// renewals.
func nodeLeaseRenew(nodes int) time.Duration {
	const perSecond = 40
	return max(10*time.Second, time.Duration((nodes+perSecond-1)/perSecond)*time.Second)
}

// largeSimAbove is the size above which the sim trades a kubelet's and IMEX's timings for fewer
// runs (probePeriodFloor, probeTimeoutFloor, livenessFailureFloor, imexLinkRetryMax) and its
// clients' HTTP/2 health check for patience (http2PingTimeout): every node's probes, IMEX links
// and API clients run in the machine's few kubelet processes, which a real cluster spreads over
// its nodes.
const largeSimAbove = 1000

// probePeriodFloor is the shortest period the simulated kubelet runs a probe at: none up to
// 1,000 nodes, then a second per 100 nodes, so that each kind of probe (a daemon's start-up
// probe every 2 s, a plugin's liveness probe every 10 s) runs at most about 100 times a second
// across the sim. Every probe of every node runs in the 2-core machine's few kubelet processes,
// which a real node spreads over its own cores: in a large job the daemons' start-up probes
// alone asked for far more runs than that, and the kubelet processes, starved, answered their
// plugins' liveness probes too late and restarted healthy plugins. A probe's
// timeout and failureThreshold stay as its spec says, so a large sim notices a failure later
// (a plugin's liveness: 3 × 24 s at 2,304 nodes, a kubelet's 3 × 10 s).
func probePeriodFloor(nodes int) time.Duration {
	const perSecond = 100
	if nodes <= largeSimAbove {
		return 0
	}
	return time.Duration((nodes+perSecond-1)/perSecond) * time.Second
}

// probeTimeoutFloor is the shortest timeout the simulated kubelet gives a probe: none up to 1,000
// nodes, then 10 s. The kubelet processes of a large sim run below the control plane
// (KubeletNice) and wait to run far longer than they run, and a probe is timed by its kubelet
// process, which is starved with the nodes it serves:
// the controller's /healthz (a 1 s timeout) answered at once yet failed, and both replicas,
// served by one kubelet process, were killed together.
func probeTimeoutFloor(nodes int) time.Duration {
	if nodes <= largeSimAbove {
		return 0
	}
	return 10 * time.Second
}

// livenessFailureFloor is the fewest consecutive failures of a liveness probe that kill a
// container: a probe's own failureThreshold up to 1,000 nodes, then at least 10. Even with the
// probe floors above, the plugins' health checks (answered in their kubelet process, timed by
// it) still missed their 10 s in a large job, and each third miss in a row killed a plugin that
// was only waiting to run, which then listed and shook hands with the apiserver again on the way
// back. Ten misses in a row (minutes, at the floored period) still kill a plugin that has really
// hung — and also plugins whose starved kubelet processes completed no check for that long
// (see docs/scale.md, "Design choices and what was measured").
func livenessFailureFloor(nodes int) int32 {
	if nodes <= largeSimAbove {
		return 0
	}
	return 10
}

// imexLinkRetryMax is the longest wait of a simulated IMEX between two attempts to reach a peer:
// its default (500 ms) up to 1,000 nodes, then 5 s. A daemon's IMEX starts before most of its
// peers in a large job and dials each missing one until it answers; these dials were a large
// share of a kubelet process's CPU while the processes waited to run (imexsim's
// LinkRetryMaxEnv).
func imexLinkRetryMax(nodes int) time.Duration {
	if nodes <= largeSimAbove {
		return 0
	}
	return 5 * time.Second
}

// http2PingTimeout is how long the API clients of a simulated-kubelet process wait for the answer
// to an HTTP/2 health check (client-go's HTTP2_PING_TIMEOUT_SECONDS): client-go's 15 s up to 1,000
// nodes, then 5 minutes. A client that has read nothing on a connection for 30 s sends a ping,
// and drops the connection, with every watch and request on it, when no answer is read within
// the timeout. In a large job the kubelet processes, starved below the control plane, read the
// answers too late: thousands of connections of in-process plugins and daemons were dropped,
// each followed by a TLS handshake and new lists and watches, which the apiserver spent its time
// on (see docs/scale.md, "Design choices and what was measured"). On loopback a connection whose
// peer is gone is reset at once; the health check only finds a hung peer, later.
func http2PingTimeout(nodes int) time.Duration {
	if nodes <= largeSimAbove {
		return 0
	}
	return 5 * time.Minute
}

// setTimings sets the node Lease renewal, the probe floors, the simulated IMEX's link retry and
// the clients' HTTP/2 health check for a sim of the given size.
func (st *State) setTimings(nodes int) {
	st.HTTP2PingTimeout = metav1.Duration{Duration: http2PingTimeout(nodes)}
	st.NodeLeaseRenew = metav1.Duration{Duration: nodeLeaseRenew(nodes)}
	st.ProbePeriodFloor = metav1.Duration{Duration: probePeriodFloor(nodes)}
	st.ProbeTimeoutFloor = metav1.Duration{Duration: probeTimeoutFloor(nodes)}
	st.LivenessFailureFloor = livenessFailureFloor(nodes)
	st.IMEXLinkRetryMax = metav1.Duration{Duration: imexLinkRetryMax(nodes)}
}

// Options configure Up.
type Options struct {
	Topology
	// StateDir holds everything the sim writes (default DefaultStateDir).
	StateDir string
	// Repo is the cdplane checkout the binaries are built from (default: found from the
	// working directory).
	Repo string
	// NumChannels is the channel devices each node publishes.
	NumChannels int
	// Runner is how the simulated kubelet runs cdplane's own pods: RunnerProcess,
	// RunnerInProcess, or RunnerAuto (default): in-process above InProcessAbove nodes.
	Runner string
	// Reuse keeps a running sim from StateDir instead of refusing.
	Reuse bool
	// Out receives progress.
	Out io.Writer
	// Timeout bounds each wait.
	Timeout time.Duration
	// IMEXMode is driverManaged (default: a daemon DaemonSet per domain) or hostManaged (every
	// node with a fabric runs a simulated nvidia-imex host service serving its rack, and the
	// planes are installed in host-managed mode).
	IMEXMode string
	// KubernetesVersion is the control plane's release, v1.MINOR[.PATCH], passed to
	// hack/k8s-bins.sh (empty: the newest supported).
	KubernetesVersion string
}

// Runners of cdplane's pods on the simulated nodes.
const (
	RunnerAuto      = "auto"
	RunnerProcess   = "process"
	RunnerInProcess = "in-process"
)

// InProcessAbove is the size above which RunnerAuto runs pods in-process: a plugin and a
// daemon process per node cost far more memory than an in-process instance, so a few hundred
// nodes of processes do not fit a laptop.
const InProcessAbove = 72

// inProcess resolves Runner.
func (o *Options) inProcess() (bool, error) {
	switch o.Runner {
	case "", RunnerAuto:
		return o.checkShards(o.Nodes > InProcessAbove)
	case RunnerProcess:
		return false, nil
	case RunnerInProcess:
		return o.checkShards(true)
	default:
		return false, fmt.Errorf("unknown runner %q: want %s, %s or %s", o.Runner, RunnerAuto, RunnerProcess, RunnerInProcess)
	}
}

// checkShards refuses, before anything starts, an in-process sim larger than the simulated
// kubelet processes can serve (maxShards of NodesPerKubelet nodes).
func (o *Options) checkShards(inProcess bool) (bool, error) {
	if inProcess && o.Nodes > maxShards*NodesPerKubelet {
		return false, fmt.Errorf("--nodes %d: an in-process sim serves at most %d nodes (%d simulated-kubelet processes of %d nodes each)",
			o.Nodes, maxShards*NodesPerKubelet, maxShards, NodesPerKubelet)
	}
	return inProcess, nil
}

// Check refuses options no sim can be started with (the topology, the runner, the IMEX mode),
// before anything is built or started: what the command line got wrong, which the CLI reports
// as a usage error.
func (o *Options) Check() error {
	if err := o.Validate(); err != nil {
		return err
	}
	if _, err := o.inProcess(); err != nil {
		return err
	}
	switch features.IMEXMode(o.IMEXMode) {
	case "", features.IMEXDriverManaged, features.IMEXHostManaged:
		return nil
	default:
		return fmt.Errorf("--imex-mode %q: want %s or %s", o.IMEXMode, features.IMEXDriverManaged, features.IMEXHostManaged)
	}
}

// DefaultStateDir is short on purpose: node directories hold Unix sockets, whose paths are
// limited to 108 bytes.
func DefaultStateDir() string { return fmt.Sprintf("/tmp/cdplane-sim-%d", os.Getuid()) }

func (o *Options) progress(format string, args ...any) {
	fmt.Fprintf(o.Out, format+"\n", args...)
}

// Up builds what is missing, starts the cluster in the background and installs the
// prerequisites and the planes; it returns with everything running.
func Up(ctx context.Context, o Options) (_ *State, err error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	inProcess, err := o.inProcess()
	if err != nil {
		return nil, err
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir()
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	if err := CheckSocketPaths(o.StateDir, BuildNodes(o.Topology)); err != nil {
		return nil, err
	}
	if prev, err := previous(&o); err != nil || prev != nil {
		return prev, err
	}
	if o.Repo == "" {
		if o.Repo, err = findRepo(); err != nil {
			return nil, err
		}
	}
	st := &State{Started: time.Now().UTC(), Repo: o.Repo, Planes: o.Planes, Nodes: BuildNodes(o.Topology), NumChannels: o.NumChannels, InProcess: inProcess,
		IMEXMode: o.IMEXMode}
	st.setTimings(o.Nodes)
	if err := prepareStateDir(o.StateDir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			o.progress("Stopping what was started (logs kept in %s)", filepath.Join(o.StateDir, "logs"))
			_ = controlplane.Stop(st.Processes, 15*time.Second)
		}
	}()
	if err := build(ctx, &o, st); err != nil {
		return nil, err
	}
	start := time.Now()
	cp, err := controlplane.Start(ctx, controlplane.Options{
		Dir: o.StateDir, BinDir: st.K8sBinDir, Progress: o.progress,
		Detached: true, ControllerManager: true, Scheduler: true,
		NodeMonitorGracePeriod: 5 * st.NodeLeaseRenew.Duration,
		Started: func(p controlplane.Process) {
			st.Processes = append(st.Processes, p)
			_ = st.save(o.StateDir)
		},
	})
	if err != nil {
		return nil, err
	}
	st.ControlPlane = *cp
	st.ControlPlane.Processes = nil
	if err := st.save(o.StateDir); err != nil {
		return nil, err
	}
	if err := setUpKubeletIdentity(ctx, o.StateDir, st); err != nil {
		return nil, err
	}
	if err := startKubelet(ctx, &o, st); err != nil {
		return nil, err
	}
	if err := install(ctx, &o, st); err != nil {
		return nil, err
	}
	o.progress("The simulated cluster is up after %s: %d nodes in %d racks, %s", time.Since(start).Round(time.Second),
		len(st.Nodes), (len(st.Nodes)+o.RackSize-1)/o.RackSize, describePlanes(st.Planes))
	return st, nil
}

// previous deals with what the state directory holds before Up starts anything: a running sim
// is reused (with Reuse) or refused; the leftover of a stopped sim, or of a `sim up` that failed
// before it recorded a process, is removed. Only a directory the sim created is reused or
// removed (see checkStateDir); prepareStateDir then refuses anything else that is there.
func previous(o *Options) (*State, error) {
	prev, err := Load(o.StateDir)
	if err != nil {
		return nil, err
	}
	if prev != nil {
		if running(prev) {
			if o.Reuse {
				o.progress("Reusing the simulated cluster running from %s (started %s)", o.StateDir, prev.Started.Format(time.RFC3339))
				return prev, nil
			}
			return nil, fmt.Errorf("a simulated cluster is already running from %s (started %s): use it (export KUBECONFIG=%s), reuse it with --reuse, or stop it with `cdplane sim down --state-dir %s`",
				o.StateDir, prev.Started.Format(time.RFC3339), prev.ControlPlane.Kubeconfig, o.StateDir)
		}
		o.progress("Removing the leftover state of a stopped simulated cluster in %s", o.StateDir)
		return nil, Down(prev, o.StateDir, o.Out)
	}
	if checkStateDir(o.StateDir, "remove") == nil {
		o.progress("Removing the leftover state of a simulated cluster that did not start in %s", o.StateDir)
		return nil, Down(nil, o.StateDir, o.Out)
	}
	return nil, nil
}

func describePlanes(ids []string) string {
	if len(ids) == 0 {
		return "the legacy control plane"
	}
	return "control planes " + strings.Join(ids, ", ")
}

// build runs the project's scripts for the control plane and kubectl (cached), and builds
// cdplane's binaries into the state directory.
func build(ctx context.Context, o *Options, st *State) error {
	o.progress("Building (or finding in the cache) etcd and the Kubernetes control plane (%s)", cmpOr(o.KubernetesVersion, "the newest supported"))
	var err error
	var k8sArgs []string
	if o.KubernetesVersion != "" {
		k8sArgs = append(k8sArgs, o.KubernetesVersion)
	}
	if st.K8sBinDir, err = script(ctx, o, filepath.Join(o.Repo, "hack", "k8s-bins.sh"), k8sArgs...); err != nil {
		return err
	}
	o.progress("Building (or finding in the cache) kubectl")
	if st.KubectlDir, err = script(ctx, o, filepath.Join(o.Repo, "hack", "kubectl.sh")); err != nil {
		return err
	}
	st.BinDir = filepath.Join(o.StateDir, "bin")
	o.progress("Building cdplane's binaries into %s", st.BinDir)
	if err := buildImageBinaries(ctx, o.Repo, st.BinDir, "", o.Out); err != nil {
		return fmt.Errorf("building cdplane: %w", err)
	}
	// The simulated IMEX for the nodes' driver root, static (no cgo): the kubelet plugin runs a
	// host-managed node's nvidia-imex-ctl chrooted into the driver root, where no C library of
	// this machine's is, as it runs the real one.
	cmd := exec.CommandContext(ctx, "go", "build", "-o", st.BinDir+"/", "./internal/sim/cmd/imex-sim")
	cmd.Dir, cmd.Stdout, cmd.Stderr = o.Repo, o.Out, o.Out
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building the simulated IMEX: %w", err)
	}
	// The simulated NVML library, a real shared library built from C, that every node's driver
	// root holds as libnvidia-ml.so.1 for the kubelet plugin to load (nodehost.InstallDriverRoot).
	o.progress("Building the simulated NVML library")
	return nvmlsim.BuildLibrary(ctx, filepath.Join(st.BinDir, nvmlsim.LibraryFile))
}

// buildImageBinaries builds, from the source tree src into dir, the simulated image: the
// product's CLI, controller and daemon, and the kubelet plugin on the simulated node's host
// (nodehost). commit, when set, is recorded in the binaries (as `make` records it; a tree
// extracted from git history has no VCS information of its own).
func buildImageBinaries(ctx context.Context, src, dir, commit string, out io.Writer) error {
	args := []string{"build", "-o", dir + "/"}
	if commit != "" {
		args = append(args, "-ldflags", "-X cdplane/internal/version.Commit="+commit)
	}
	args = append(args, "./cmd/cdplane", "./cmd/cdplane-controller", "./cmd/cdplane-daemon",
		"./internal/sim/cmd/cdplane-kubelet-plugin")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = src, out, out
	cmd.Env = os.Environ()
	if os.Getenv("CGO_CFLAGS") == "" {
		// go-nvml's C headers declare deprecated functions: without this a first build prints
		// some 150 lines of warnings about code that is not ours (the Makefile sets the same).
		cmd.Env = append(cmd.Env, "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
	}
	return cmd.Run()
}

// script runs a build script, its progress on Out, and returns the last line it prints.
func script(ctx context.Context, o *Options, path string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir, cmd.Stderr = o.Repo, o.Out
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// NodesPerKubelet is how many nodes one simulated-kubelet process serves when pods run
// in-process: a node's plugin, daemon and simulated IMEX links hold about 50 descriptors, and a
// process may not raise its open-file limit beyond the hard limit (20,000 here).
const NodesPerKubelet = 288

// kubeletShards is how many simulated-kubelet processes serve the sim's nodes.
func (st *State) kubeletShards() int {
	if !st.InProcess {
		return 1
	}
	return (len(st.Nodes) + NodesPerKubelet - 1) / NodesPerKubelet
}

// startKubelet starts `cdplane sim kubelet` in the background — one process, or with pods
// in-process one per NodesPerKubelet nodes — then waits for every node to be Ready.
func startKubelet(ctx context.Context, o *Options, st *State) error {
	how := "as processes"
	if st.InProcess {
		how = "in the kubelet's process"
	}
	shards := st.kubeletShards()
	leases := ""
	if d := st.NodeLeaseRenew.Duration; d > kubelet.DefaultLeaseRenewInterval {
		leases = fmt.Sprintf("; node Leases renewed every %s, a kubelet's 10s being too many writes at this size", d)
	}
	if d := st.ProbePeriodFloor.Duration; d > 0 {
		kills := ""
		if n := st.LivenessFailureFloor; n > 0 {
			kills = fmt.Sprintf(" and %d misses in a row before a liveness kill", n)
		}
		leases += fmt.Sprintf("; probes run at most every %s, with at least %s to answer%s, every node's probes sharing these processes",
			d, st.ProbeTimeoutFloor.Duration, kills)
	}
	o.progress("Starting the simulated kubelet for %d nodes in %d process(es) (cdplane's pods run %s%s)", len(st.Nodes), shards, how, leases)
	var started []controlplane.Process
	for i := range shards {
		name := "sim-kubelet"
		if shards > 1 {
			name = fmt.Sprintf("sim-kubelet-%d", i)
		}
		p, err := controlplane.StartDetached(name, filepath.Join(st.BinDir, "cdplane"),
			filepath.Join(o.StateDir, "logs", name+".log"), "sim", "kubelet", "--state-dir", o.StateDir,
			"--shard", strconv.Itoa(i), "--shards", strconv.Itoa(shards))
		if err != nil {
			return err
		}
		started = append(started, p)
		st.Processes = append(st.Processes, p)
		if err := st.save(o.StateDir); err != nil {
			return err
		}
	}
	c, err := st.client()
	if err != nil {
		return err
	}
	return waitFor(ctx, o, "nodes to be Ready", func(ctx context.Context) (bool, string, error) {
		for _, p := range started {
			if !controlplane.Alive(p) {
				return false, "", fmt.Errorf("the simulated kubelet %s exited; see %s", p.Name, p.Log)
			}
		}
		nodes := &corev1.NodeList{}
		if err := c.List(ctx, nodes, client.HasLabels{NodeSpecLabel}); err != nil {
			return false, "", err
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && len(n.Spec.Taints) == 0 {
					ready++
				}
			}
		}
		return ready == len(st.Nodes), fmt.Sprintf("%d of %d nodes Ready", ready, len(st.Nodes)), nil
	})
}

// install installs the prerequisites and the planes through the charts, each plane's nodes
// assigned to it first, and one namespace per plane ("<id>-workloads") assigned for users.
func install(ctx context.Context, o *Options, st *State) error {
	m, err := lifecycle.New(lifecycle.Options{Getter: lifecycle.KubeconfigGetter(st.ControlPlane.Kubeconfig, ""), Out: o.Out, Timeout: o.Timeout, Wait: true})
	if err != nil {
		return err
	}
	if err := m.InstallPrerequisites(ctx, nil); err != nil {
		return err
	}
	c, err := st.client()
	if err != nil {
		return err
	}
	values := st.PlaneValues()
	ids := st.Planes
	if len(ids) == 0 {
		ids = []string{""}
	}
	for _, id := range ids {
		if id != "" {
			n := 0
			for _, node := range st.Nodes {
				if node.Plane == id {
					if _, err := lifecycle.Assign(ctx, c, id, lifecycle.Target{Kind: lifecycle.KindNode, Name: node.Name}); err != nil {
						return err
					}
					n++
				}
			}
			ns := &corev1.Namespace{}
			ns.Name = id + "-workloads"
			if err := c.Create(ctx, ns); client.IgnoreAlreadyExists(err) != nil {
				return err
			}
			if _, err := lifecycle.Assign(ctx, c, id, lifecycle.Target{Kind: lifecycle.KindNamespace, Name: ns.Name}); err != nil {
				return err
			}
			o.progress("Assigned %d nodes and namespace %s to control plane %q", n, ns.Name, id)
		}
		if err := m.InstallPlane(ctx, id, values); err != nil {
			return err
		}
	}
	return nil
}

// PlaneValues are the plane chart's values on the sim: the sim's image (run from its binaries),
// the sim's channel count; for in-process (large)
// sims, tolerant leader-election timing. An upgrade (`cdplane
// apply plane`) on the sim starts from these.
func (st *State) PlaneValues() map[string]any {
	v := map[string]any{
		"image":         map[string]any{"repository": "cdplane", "tag": "sim"},
		"kubeletPlugin": map[string]any{"numChannels": st.NumChannels},
	}
	if st.HostManaged() {
		v["featureGates"] = map[string]any{string(features.HostManagedIMEXDaemon): true}
		v["imex"] = map[string]any{"mode": string(features.IMEXHostManaged)}
	}
	if st.InProcess {
		// A large sim loads its 2-core apiserver past the default 10s renew deadline: the
		// controller lost its lease again and again.
		v["controller"] = map[string]any{"leaderElection": map[string]any{"leaseDuration": "60s", "renewDeadline": "45s", "retryPeriod": "5s"}}
	}
	return v
}

func (st *State) client() (client.Client, error) {
	cfg, err := st.restConfig()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme.New()})
}

// restConfig is the sim administrator's client configuration.
func (st *State) restConfig() (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", st.ControlPlane.Kubeconfig)
}

// Clientset returns a clientset for the sim's administrator.
func (st *State) Clientset() (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", st.ControlPlane.Kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

func (st *State) save(dir string) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, stateFile))
}

// Load reads the state in dir; nil when there is none. A state file is read only from a
// directory the sim created (see checkStateDir): anyone could have written one elsewhere.
func Load(dir string) (*State, error) {
	path := filepath.Join(dir, stateFile)
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err := checkStateDir(dir, "use"); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	st := &State{}
	if err := json.Unmarshal(data, st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return st, nil
}

func running(st *State) bool {
	for _, p := range st.Processes {
		if controlplane.Alive(p) {
			return true
		}
	}
	return false
}

// Down stops every process the state records (the simulated kubelet first, which stops the
// pods' processes; then the control plane, apiserver before etcd) and removes dir. It touches
// nothing unless dir is a state directory the sim created (see checkStateDir). A recorded
// process whose PID now belongs to another process (another start time or command line) is
// not signalled; Down says so and goes on.
func Down(st *State, dir string, out io.Writer) error {
	if err := checkStateDir(dir, "remove"); err != nil {
		return err
	}
	if st != nil {
		for i := len(st.Processes) - 1; i >= 0; i-- {
			p := st.Processes[i]
			if controlplane.Alive(p) {
				fmt.Fprintf(out, "Stopping %s (pid %d)\n", p.Name, p.PID)
			}
			err := controlplane.Stop([]controlplane.Process{p}, 30*time.Second)
			if reused := (*controlplane.ReusedPIDError)(nil); errors.As(err, &reused) {
				fmt.Fprintf(out, "Warning: %v\n", reused)
				continue
			}
			if err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(out, "Removing %s\n", dir)
	return os.RemoveAll(dir)
}

// RestartComponent restarts a control-plane component of the sim in dir (e.g. "kube-apiserver"),
// records its new PID in the state, and waits until the apiserver answers again.
func RestartComponent(ctx context.Context, st *State, dir, name string, timeout time.Duration) error {
	for i, p := range st.Processes {
		if p.Name != name {
			continue
		}
		np, err := controlplane.Restart(p, 30*time.Second)
		if err != nil {
			return err
		}
		st.Processes[i] = np
		if err := st.save(dir); err != nil {
			return err
		}
		c, err := st.client()
		if err != nil {
			return err
		}
		o := &Options{Out: io.Discard, Timeout: timeout}
		return waitFor(ctx, o, "the apiserver to answer", func(ctx context.Context) (bool, string, error) {
			if !controlplane.Alive(np) {
				return false, "", fmt.Errorf("%s exited; see %s", name, np.Log)
			}
			return c.List(ctx, &corev1.NamespaceList{}) == nil, "", nil
		})
	}
	return fmt.Errorf("the sim in %s has no process %s", dir, name)
}

// findRepo walks up from the working directory to the cdplane checkout.
func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module cdplane\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run cdplane sim up from a cdplane checkout (it builds the binaries the simulated nodes run), or pass --repo")
		}
		dir = parent
	}
}

func waitFor(ctx context.Context, o *Options, what string, cond func(context.Context) (bool, string, error)) error {
	return progress.Wait(ctx, o.Out, o.Timeout, 500*time.Millisecond, what, cond)
}

func cmpOr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
