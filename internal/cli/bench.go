package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"cdplane/internal/bench"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/metrics"
	"cdplane/internal/plot"
	"cdplane/internal/sim/controlplane"
)

func newBenchCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Benchmarks against a real apiserver"}
	var (
		o        bench.Options
		modes    string
		kube     = newKubeFlags(false)
		output   outputFlags
		asJSON   bool
		plotPath string
		// controllerWhere: process (its own, as in a cluster) or in-process.
		controllerWhere string
		nodesNice       int
	)
	reg := &cobra.Command{
		Use: "registration",
		Example: `  cdplane bench registration --nodes 288
  cdplane bench registration --nodes 2304 --modes cdplane -o json --plot /tmp/registration.svg
  cdplane bench registration --kubeconfig ~/.kube/bench --modes cdplane`,
		Short: "N daemons joining one ComputeDomain: this design against the original's protocols and the floor",
		Long: `Creates a ComputeDomain, N nodes and N daemon pods, then runs N daemon instances in this process
(daemon service-account identity, the daemon's client QPS/burst) while the benchmark plays each
node's kubelet (pod IP, Ready once the daemon's check passes; per-node identities). IMEX is an
instant stand-in: the benchmark measures registration through the API. Each mode runs on fresh
objects (see below for the control plane). The floor is the time for N instances to make the writes no
protocol avoids (pod label, pod status) with the same identities and QPS, and the one watch a
daemon needs (its clique). Each mode reports, per step of a daemon's registration (pod
running, label, watch, daemon ready, pod ready), when the instances got there. A mode that
passes --timeout or --max-rss-gib is reported with how many daemons had joined.
Conflicts (409) and throttling (429) come from the apiserver's own metrics.

Each mode also reports what the registration cost the control plane, beside the floor's of the
same run and per joined daemon: kube-apiserver's and etcd's CPU seconds, the bytes etcd wrote to
its log, requests, watch events and bytes (and those of cliques, against the least possible:
each daemon receiving its final clique once). The whole measurement runs --runs times; the
report gives each run, then per mode the median and spread of its seconds and of its ratio to
the floor of the same run, and the medians of the cost ratios.

Without --kubeconfig it starts its own etcd and kube-apiserver from the cached builds
(hack/k8s-bins.sh builds them on first use), a fresh pair for the floor and for each mode, so
that every mode starts on the same empty cluster; with --kubeconfig every mode runs on that
cluster, one after the other, each on fresh objects, and etcd's figures are not measured (the
benchmark cannot reach that cluster's etcd).`,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			o.Modes = splitModes(modes)
			p, err := jsonAlias(&output, asJSON)
			if err != nil {
				return usage(err)
			}
			if o.Runs < 1 {
				return usage(fmt.Errorf("--runs must be at least 1, got %d", o.Runs))
			}
			if err := o.Validate(); err != nil {
				return usage(err)
			}
			if nodesNice < 0 || nodesNice > 19 {
				return usage(fmt.Errorf("--nodes-nice must be between 0 and 19, got %d", nodesNice))
			}
			if nodesNice > 0 && !loweredCopy() {
				// Again, in a session of its own: lowering this one would lower the terminal's.
				self, err := os.Executable()
				if err != nil {
					return fmt.Errorf("finding this binary to run it at nice %d: %w", nodesNice, err)
				}
				return runLowered(cmd.Context(), append([]string{self}, commandArgs(cmd.Context())...), nodesNice,
					cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			if nodesNice > 0 {
				// Not passed on: a cdplane started from here (the controller process) is not
				// the lowered copy.
				_ = os.Unsetenv(envLowered)
				ok, err := lowerSession(autogroupFile, autogroupEnabled, nodesNice)
				if err != nil {
					return err
				}
				if ok {
					o.NodesNice = nodesNice
					fmt.Fprintf(cmd.ErrOrStderr(), "== the simulated nodes (this process) run at nice %d, below the control plane's processes\n", nodesNice)
				} else {
					fmt.Fprintln(cmd.ErrOrStderr(), "== --nodes-nice: this kernel schedules without autogroups; the simulated nodes run at the control plane's priority")
				}
			}
			switch controllerWhere {
			case "process":
				self, err := os.Executable()
				if err != nil {
					return fmt.Errorf("finding this binary to run the controller process: %w", err)
				}
				o.ControllerCommand = []string{self, "bench", "controller"}
			case "in-process":
			default:
				return usage(fmt.Errorf("--controller must be process or in-process, got %q", controllerWhere))
			}
			if plotPath != "" {
				if err := plot.CheckPath(plotPath); err != nil {
					return usage(err)
				}
			}
			// Progress goes to stderr, also with -o json (the figures go to stdout): a run at
			// tens of thousands of nodes takes many minutes.
			o.Progress = cmd.ErrOrStderr()
			// Thousands of in-process watches log every reconnect; keep the figures readable.
			silenceKlog(cmd)
			var cfg *rest.Config
			if !kube.given(cmd) {
				// Its own control plane for the floor and for each mode: every one starts on
				// the same empty cluster.
				o.FreshCluster = func(context.Context) (bench.Cluster, error) { return benchControlPlane(cmd) }
			} else {
				var stop func()
				if cfg, stop, err = benchCluster(cmd, kube); err != nil {
					return err
				}
				defer stop()
			}
			rep, err := bench.Run(cmd.Context(), cfg, o)
			if err != nil {
				return err
			}
			if plotPath != "" {
				if err := plot.WriteFile(plotPath, joinedChart(rep)); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "Wrote the plot of daemons joined over time (each mode's median run) to %s\n", plotPath)
			}
			if p != nil {
				return p.PrintObj(newDocument(kindBenchReport, rep), cmd.OutOrStdout())
			}
			printReport(cmd, rep)
			return nil
		},
	}
	f := reg.Flags()
	f.IntVar(&o.Nodes, "nodes", 288, "Daemon instances (nodes) in the domain")
	f.IntVar(&o.CliqueSize, "clique-size", 18, "Nodes per clique")
	f.StringVar(&o.Arrival, "arrival", "burst", "burst: all daemons start at once; ramp: starts spread over --ramp")
	f.DurationVar(&o.Ramp, "ramp", 10*time.Second, "Spread of the starts with --arrival ramp")
	f.StringVar(&modes, "modes", strings.Join(bench.AllModes, ","), "Modes to run, comma-separated")
	f.IntVar(&o.Runs, "runs", 3, "Times to run the whole measurement (the floor and every mode, each on a fresh control plane without --kubeconfig); the report gives each run and the median and spread over them")
	f.DurationVar(&o.Timeout, "timeout", 3*time.Minute, "Longest wait for one mode's domain to be Ready; a mode that takes longer is reported with this as a lower bound")
	f.Float64Var(&o.MaxRSSGiB, "max-rss-gib", 12, "Stop a mode once this process and the controller process use this much resident memory together, and report how many had joined; 0: no limit")
	kube.add(reg)
	output.add(reg)
	addJSONAlias(reg, &asJSON)
	f.StringVar(&plotPath, "plot", "", "Write a picture (.svg) of daemons joined over time, one line per mode and the floor, each from its median run")
	f.StringVar(&o.ProfileDir, "profile", "", "Write CPU profiles per mode into this directory: this process (the daemon instances; the controller too with --controller in-process), the controller process and the kube-apiserver")
	f.IntVar(&o.ProfileSeconds, "profile-seconds", 30, "Length of the kube-apiserver's profile (it is taken from the start of each mode)")
	f.DurationVar(&o.BatchWindow, "batch-window", 0, "The controller's --batch-window in the cdplane modes (0: its default, 200ms)")
	f.StringVar(&controllerWhere, "controller", "in-process", "Where the cdplane modes' controller runs: in-process (sharing this process's scheduler and CPU with the daemon instances) or process (a process of its own, with its own CPU profile and memory figures)")
	f.IntVar(&nodesNice, "nodes-nice", 0, "Run the simulated nodes (this process: every daemon instance and kubelet) at this nice value, below the control plane (kube-apiserver, etcd and the controller process, each in a scheduling group of its own at the default priority), as the simulated cluster runs its kubelets: they stand for machines of their own. The command runs itself again in a session of its own to do so (Linux autogroups). 0: every process at the same priority")
	cmd.AddCommand(reg, newMemoryCommand(), newSlicesCommand(), newBenchControllerCommand())
	return cmd
}

// newBenchControllerCommand is the controller process of `bench registration`'s cdplane modes.
func newBenchControllerCommand() *cobra.Command {
	var a bench.ControllerArgs
	cmd := &cobra.Command{
		Use:    "controller",
		Short:  "The controller of bench registration's cdplane modes (started by it; stops when its stdin closes)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			silenceKlog(cmd)
			return bench.ServeController(cmd.Context(), a, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	a.AddFlags(cmd.Flags())
	return cmd
}

func newMemoryCommand() *cobra.Command {
	var (
		o      bench.MemoryOptions
		kube   = newKubeFlags(false)
		output outputFlags
	)
	mem := &cobra.Command{
		Use: "memory",
		Example: `  cdplane bench memory
  cdplane bench memory --objects 1000 -o json`,
		Short: "A plane controller's heap on an empty cluster and with another plane's objects present",
		Long: `Runs plane-a's controller (ComputeDomains, cleanup, Secret mirroring) in this process until its
caches synced and reads the Go heap after two GCs: first on an empty cluster, then with --objects
Secrets, daemon pods and cliques of plane-b present. As a control it measures plane-b's controller,
which does cache those objects. Without --kubeconfig it starts its own etcd and kube-apiserver.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := output.printer()
			if err != nil {
				return usage(err)
			}
			silenceKlog(cmd)
			o.Progress = cmd.ErrOrStderr()
			var given *kubeFlags
			if kube.given(cmd) {
				given = kube
			}
			cfg, stop, err := benchCluster(cmd, given)
			if err != nil {
				return err
			}
			defer stop()
			rep, err := bench.Memory(cmd.Context(), cfg, o)
			if err != nil {
				return err
			}
			if p != nil {
				return p.PrintObj(newDocument(kindBenchMemory, rep), cmd.OutOrStdout())
			}
			printMemoryReport(cmd.OutOrStdout(), rep)
			return nil
		},
	}
	mem.Flags().IntVar(&o.Objects, "objects", 10000, "Secrets, pods and cliques of the other plane (each)")
	kube.add(mem)
	output.add(mem)
	return mem
}

func splitModes(s string) []string {
	var out []string
	for _, m := range strings.Split(s, ",") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	return out
}

// benchCluster is the cluster kube selects, or, with nil, a control plane of its own started
// for the run (stop stops it).
func benchCluster(cmd *cobra.Command, kube *kubeFlags) (*rest.Config, func(), error) {
	if kube != nil {
		cfg, err := kube.restConfig()
		return cfg, func() {}, err
	}
	cl, err := benchControlPlane(cmd)
	if err != nil {
		return nil, nil, err
	}
	return cl.Config, cl.Stop, nil
}

// benchControlPlane starts a control plane of the benchmark's own, whose etcd it can read.
func benchControlPlane(cmd *cobra.Command) (bench.Cluster, error) {
	fmt.Fprintln(cmd.ErrOrStderr(), "== starting etcd and kube-apiserver (builds them on first use)")
	binDir, err := controlplane.BinDir(cmd.Context())
	if err != nil {
		return bench.Cluster{}, err
	}
	dir, err := os.MkdirTemp("", "cdplane-bench-")
	if err != nil {
		return bench.Cluster{}, fmt.Errorf("creating the control plane's directory: %w", err)
	}
	cp, err := controlplane.Start(cmd.Context(), controlplane.Options{Dir: dir, BinDir: binDir, InstallCRDs: true,
		APIServerArgs: map[string][]string{
			// Room for thousands of watches and concurrent writers, as a production apiserver has.
			"max-requests-inflight": {"800"}, "max-mutating-requests-inflight": {"400"},
			// The benchmark's node identities are authorized by its own ClusterRole, not the
			// Node authorizer, as in every run measured so far.
			"authorization-mode": {"RBAC"},
		}})
	if err != nil {
		_ = os.RemoveAll(dir)
		return bench.Cluster{}, err
	}
	stop := func() {
		if err := cp.Stop(15 * time.Second); err != nil {
			fmt.Fprintln(cmd.ErrOrStderr(), "stopping the control plane:", err)
			return
		}
		_ = os.RemoveAll(dir)
	}
	cfg, err := cp.AdminConfig()
	if err != nil {
		stop()
		return bench.Cluster{}, err
	}
	cfg.QPS, cfg.Burst = 200, 400
	cl, err := bench.ControlPlaneCluster(cp, cfg, stop)
	if err != nil {
		stop()
	}
	return cl, err
}

// printReport prints each run's tables, then the summary over the runs.
func printReport(cmd *cobra.Command, rep *bench.Report) {
	w := cmd.OutOrStdout()
	runs := rep.Runs
	if len(runs) == 0 { // a report of one run, as Run wrote it before it had runs
		runs = []bench.RunReport{{FloorSeconds: rep.FloorSeconds, Floor: rep.Floor, Modes: rep.Modes}}
	}
	for i, run := range runs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "run %d/%d: ", i+1, len(runs))
		printRun(w, rep, run)
	}
	if len(rep.Summary) == 0 {
		return
	}
	fmt.Fprintf(w, "\nsummary over %d runs: median (min–max); × floor against the floor of the same run, costs per joined daemon; ≥ a lower bound (a run that did not finish)\n", len(runs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range bench.SummaryTable(rep) {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	_ = tw.Flush()
	if !rep.EtcdMeasured {
		fmt.Fprintln(w, "etcd's CPU and bytes are not measured on a cluster given with --kubeconfig: the benchmark cannot reach its etcd")
	}
}

// printRun prints one run: a row per mode, where each daemon's time went, the controller's passes.
func printRun(w io.Writer, rep *bench.Report, run bench.RunReport) {
	fmt.Fprintf(w, "registration: %d nodes, cliques of %d, %s arrival; floor %.2fs\n", rep.Nodes, rep.CliqueSize, rep.Arrival, run.FloorSeconds)
	fmt.Fprintf(w, "%-18s %9s %8s %12s %10s %8s %8s %9s %9s\n", "mode", "seconds", "xfloor", "writes/dmn", "ctrl-wr", "409s", "429s", "p50(ms)", "p99(ms)")
	for _, m := range bench.AllModes {
		r, ok := run.Modes[m]
		if !ok {
			continue
		}
		more := ""
		switch r.StoppedBy {
		case "memory":
			more = fmt.Sprintf("  (stopped at the memory limit with %d of %d joined: seconds is a lower bound)", r.JoinedAtEnd, rep.Nodes)
		case "timeout":
			more = fmt.Sprintf("  (%d of %d joined within the timeout: seconds is a lower bound)", r.JoinedAtEnd, rep.Nodes)
		}
		fmt.Fprintf(w, "%-18s %9.2f %8.2f %12.2f %10d %8.0f %8.0f %9.0f %9.0f%s\n", m, r.Seconds, r.RatioToFloor, r.WritesPerDaemon,
			r.ControllerWrites, r.Conflicts, r.Throttled, r.P50Ms, r.P99Ms, more)
	}
	fmt.Fprintf(w, "\nwhere each daemon's time went (ms from its start to the first success of each step: p50 / p99 / max)\n")
	for _, m := range append([]string{"floor"}, bench.AllModes...) {
		r, ok := run.Modes[m]
		if m == "floor" {
			r, ok = run.Floor, true
		}
		if !ok || len(r.Phases) == 0 {
			continue
		}
		fmt.Fprintf(w, "%-18s", m)
		for _, p := range r.Phases {
			fmt.Fprintf(w, " %s %.0f/%.0f/%.0f", p.Name, p.P50Ms, p.P99Ms, p.MaxMs)
		}
		fmt.Fprintf(w, "  (%d with a failed call)\n", r.InstancesRetrying)
	}
	for _, m := range bench.AllModes {
		r, ok := run.Modes[m]
		if !ok || len(r.ReconcileSteps) == 0 {
			continue
		}
		fmt.Fprintf(w, "%-18s controller: %.0f passes, %.1fs:", m, r.Reconciles, r.ReconcileSeconds)
		for _, step := range []string{metrics.ReconcileStepResources, metrics.ReconcileStepMembership, metrics.ReconcileStepCliques, metrics.ReconcileStepStatus} {
			if s, ok := r.ReconcileSteps[step]; ok {
				fmt.Fprintf(w, " %s %.1fs", step, s)
			}
		}
		if r.LastHopMs != nil {
			fmt.Fprintf(w, "; last hop %.0f ms from the last pod Ready", *r.LastHopMs)
			if r.LastHopFromSeenMs != nil {
				fmt.Fprintf(w, " (%.0f ms from the controller seeing it)", *r.LastHopFromSeenMs)
			}
		}
		fmt.Fprintln(w)
	}
}

func newSlicesCommand() *cobra.Command {
	var (
		o        bench.SlicesOptions
		channels string
		kube     = newKubeFlags(false)
		output   outputFlags
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use: "slices",
		Example: `  cdplane bench slices --nodes 1000 --num-channels 2048,1
  cdplane bench slices --nodes 20016 --num-channels 2048 -o json`,
		Short: "What the kubelet plugin's ResourceSlices cost kube-apiserver, etcd and kube-scheduler, per count of channels",
		Long: `A slice-only load: for each count in --num-channels it creates --nodes Nodes and, for each, exactly the
ResourceSlices the kubelet plugin publishes with that --num-channels (channel-0 … channel-(C-1) and
daemon-0, at most 128 devices a slice, named, owned and pooled as the DRA helper makes them). No
kubelets and no plugins run. It reports:
  - the slices' count and size: JSON as sent, protobuf as the apiserver stores them, and the
    apiserver's own figures (apiserver_resource_objects and apiserver_resource_size_estimate_bytes
    of resourceslices, apiserver_storage_size_bytes: etcd's database file, all nodes' objects);
  - the time to create the nodes and slices (32 workers, one administrator client);
  - the resident memory (VmRSS) and Go heap in use (go_memstats_heap_inuse_bytes, garbage
    included) of kube-apiserver and kube-scheduler, on the empty cluster and once the scheduler
    has caught up: its resident memory and heap in use each stayed within 2% (or 4 MiB) for 10 s,
    sampled every second, waiting at most --settle-timeout (then the figures are marked
    unsettled);
  - the live heap (go_gc_heap_live_bytes) each found at its first GC after that (Go runs one at
    least every 2 minutes): what the objects cost once garbage is gone.

Without --kubeconfig each count runs on its own etcd, kube-apiserver and kube-scheduler, started
from the cached builds (hack/k8s-bins.sh builds them on first use) and stopped after it, so that
one count's memory does not include another's. With --kubeconfig every count runs on that cluster
one after the other, each count's nodes and slices deleted once measured; the memory figures then
come from the apiserver's metrics only, and the scheduler is not measured.

If creating fails part way (etcd's 8 GiB quota, for instance), or the control plane's processes
together use more than --max-rss-gib of resident memory (checked every second; the 2048 channels
of 200 nodes take about 5 GiB), the count is measured as far as it got, reported with the error
and the number of nodes whose slices were all created, and the command exits non-zero after
printing the figures.

  cdplane bench slices --nodes 20016 --num-channels 2048,1`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := jsonAlias(&output, asJSON)
			if err != nil {
				return usage(err)
			}
			counts, err := bench.ParseChannelCounts(channels)
			if err != nil {
				return usage(err)
			}
			o.NumChannels = counts
			if err := o.Validate(); err != nil {
				return usage(err)
			}
			o.Progress = cmd.ErrOrStderr()
			silenceKlog(cmd)
			clusters, err := slicesClusters(cmd, kube)
			if err != nil {
				return err
			}
			rep, err := bench.Slices(cmd.Context(), clusters, o)
			if rep != nil && len(rep.Runs) > 0 {
				if p != nil {
					if perr := p.PrintObj(newDocument(kindBenchSlices, rep), cmd.OutOrStdout()); perr != nil {
						return perr
					}
				} else {
					printSlicesReport(cmd.OutOrStdout(), rep)
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Nodes, "nodes", 1000, "Nodes, each with its ResourceSlices (20016 for the largest supported cluster)")
	f.StringVar(&channels, "num-channels", strconv.Itoa(kubeletplugin.MaxChannels), "Channels per node to measure, comma-separated, one run each (1 to 2048)")
	f.DurationVar(&o.SettleTimeout, "settle-timeout", 5*time.Minute, "Longest wait for the scheduler to catch up after creating the objects")
	f.Float64Var(&o.MaxRSSGiB, "max-rss-gib", 12, "Stop creating once etcd, kube-apiserver and kube-scheduler use this much resident memory together, and measure what is there; 0: no limit (not checked with --kubeconfig)")
	kube.add(cmd)
	output.add(cmd)
	addJSONAlias(cmd, &asJSON)
	return cmd
}

// slicesClusters is the cluster the kubeconfig flags select, when one is given, or a fresh
// control plane for each count.
func slicesClusters(cmd *cobra.Command, kube *kubeFlags) (bench.SliceClusterFunc, error) {
	if kube.given(cmd) {
		cfg, err := kube.restConfig()
		if err != nil {
			return nil, err
		}
		return bench.ExistingCluster(cfg), nil
	}
	binDir, err := controlplane.BinDir(cmd.Context())
	if err != nil {
		return nil, err
	}
	return bench.FreshControlPlanes(binDir, cmd.ErrOrStderr()), nil
}

// printSlicesReport prints a table with a column per count of channels.
func printSlicesReport(w io.Writer, rep *bench.SlicesReport) {
	cp := "a fresh control plane per count"
	if !rep.FreshControlPlane {
		cp = "one shared cluster"
	}
	fmt.Fprintf(w, "slices: %d nodes, %s\n", rep.Nodes, cp)
	mib := func(b uint64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }
	opt := func(v *float64, scale float64) string {
		if v == nil {
			return "-"
		}
		return strconv.FormatFloat(*v/scale, 'f', 1, 64)
	}
	row := func(name string, cell func(r bench.SlicesResult) string) {
		fmt.Fprintf(w, "%-36s", name)
		for _, r := range rep.Runs {
			fmt.Fprintf(w, " %14s", cell(r))
		}
		fmt.Fprintln(w)
	}
	sched := func(get func(m *bench.ComponentMemory) uint64) func(r bench.SlicesResult) string {
		return func(r bench.SlicesResult) string {
			if r.Scheduler == nil {
				return "-"
			}
			return mib(get(r.Scheduler))
		}
	}
	row("channels per node", func(r bench.SlicesResult) string { return strconv.Itoa(r.NumChannels) })
	row("slices per node", func(r bench.SlicesResult) string { return strconv.Itoa(r.SlicesPerNode) })
	row("nodes created (all slices)", func(r bench.SlicesResult) string { return strconv.Itoa(r.NodesCreated) })
	row("slices created", func(r bench.SlicesResult) string { return strconv.FormatInt(r.SlicesCreated, 10) })
	row("slices stored (apiserver list)", func(r bench.SlicesResult) string { return strconv.FormatInt(r.StoredSlices, 10) })
	row("create seconds", func(r bench.SlicesResult) string { return fmt.Sprintf("%.1f", r.CreateSeconds) })
	row("objects/s", func(r bench.SlicesResult) string { return fmt.Sprintf("%.0f", r.ObjectsPerSec) })
	row("slices JSON sent (MiB)", func(r bench.SlicesResult) string { return mib(uint64(r.SlicesJSONBytes)) })
	row("slices protobuf stored (MiB)", func(r bench.SlicesResult) string { return mib(uint64(r.SlicesStoredBytes)) })
	row("apiserver_resource_objects", func(r bench.SlicesResult) string { return opt(r.StorageObjects, 1) })
	row("apiserver size estimate (MiB)", func(r bench.SlicesResult) string { return opt(r.StorageEstimateBytes, 1<<20) })
	row("apiserver_storage_size (MiB)", func(r bench.SlicesResult) string { return opt(r.StorageSizeBytes, 1<<20) })
	row("kube-apiserver RSS before (MiB)", func(r bench.SlicesResult) string { return mib(r.APIServer.Before.RSSBytes) })
	row("kube-apiserver RSS after (MiB)", func(r bench.SlicesResult) string { return mib(r.APIServer.After.RSSBytes) })
	row("kube-apiserver heap before (MiB)", func(r bench.SlicesResult) string { return mib(r.APIServer.Before.HeapInuseBytes) })
	row("kube-apiserver heap after (MiB)", func(r bench.SlicesResult) string { return mib(r.APIServer.After.HeapInuseBytes) })
	row("kube-apiserver live heap, GC (MiB)", func(r bench.SlicesResult) string { return mib(r.APIServer.HeapLiveAfterGCBytes) })
	row("kube-scheduler RSS before (MiB)", sched(func(m *bench.ComponentMemory) uint64 { return m.Before.RSSBytes }))
	row("kube-scheduler RSS after (MiB)", sched(func(m *bench.ComponentMemory) uint64 { return m.After.RSSBytes }))
	row("kube-scheduler heap before (MiB)", sched(func(m *bench.ComponentMemory) uint64 { return m.Before.HeapInuseBytes }))
	row("kube-scheduler heap after (MiB)", sched(func(m *bench.ComponentMemory) uint64 { return m.After.HeapInuseBytes }))
	row("kube-scheduler live heap, GC (MiB)", sched(func(m *bench.ComponentMemory) uint64 { return m.HeapLiveAfterGCBytes }))
	row("settled (seconds waited)", func(r bench.SlicesResult) string {
		if !r.Settled {
			return fmt.Sprintf("no (%.0f)", r.SettleSeconds)
		}
		return fmt.Sprintf("yes (%.0f)", r.SettleSeconds)
	})
	for _, r := range rep.Runs {
		if r.Error != "" {
			fmt.Fprintf(w, "%d channels: creation stopped after %d of %d nodes: %s\n", r.NumChannels, r.NodesCreated, r.NodesRequested, r.Error)
		}
	}
}

// joinedChart draws daemons joined over time: the floor, then each mode in the order they ran,
// each from its median run (by seconds; of an even count, the faster of the two middle ones),
// one line per mode: a line per run made a chart of fifteen lines that no one could read.
func joinedChart(rep *bench.Report) plot.Chart {
	title := fmt.Sprintf("%d daemons joining one ComputeDomain (cliques of %d, %s arrival)", rep.Nodes, rep.CliqueSize, rep.Arrival)
	if len(rep.Runs) > 1 {
		title += fmt.Sprintf(", median of %d runs", len(rep.Runs))
	}
	c := plot.Chart{Title: title, XLabel: "seconds since the daemons started", YLabel: "daemons joined"}
	add := func(name string) {
		results, runs := resultsOf(rep, name)
		if len(results) == 0 {
			return
		}
		i := medianRun(results)
		r := results[i]
		s := plot.Series{Name: name}
		if len(results) > 1 {
			s.Name += fmt.Sprintf(" (run %d)", runs[i])
		}
		for _, p := range r.Joined {
			s.Points = append(s.Points, plot.Point{X: p.Seconds, Y: float64(p.Count)})
		}
		if r.TimedOut {
			s.Name += " (did not finish)"
		}
		c.Series = append(c.Series, s)
	}
	add("floor")
	for _, m := range bench.AllModes {
		add(m)
	}
	return c
}

// resultsOf is mode's result in each run that measured it ("floor": the floor's), and the
// number of each one's run, from 1.
func resultsOf(rep *bench.Report, mode string) (results []bench.Result, runs []int) {
	all := rep.Runs
	if len(all) == 0 { // a report of one run, as Run wrote it before it had runs
		all = []bench.RunReport{{FloorSeconds: rep.FloorSeconds, Floor: rep.Floor, Modes: rep.Modes}}
	}
	for n, run := range all {
		r, ok := run.Modes[mode]
		if mode == "floor" {
			r, ok = run.Floor, true
		}
		if ok {
			results, runs = append(results, r), append(runs, n+1)
		}
	}
	return results, runs
}

// medianRun is the index of the result with the median seconds (the lower middle one of an
// even count).
func medianRun(results []bench.Result) int {
	idx := make([]int, len(results))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return results[idx[a]].Seconds < results[idx[b]].Seconds })
	return idx[(len(idx)-1)/2]
}

// silenceKlog discards what the Kubernetes libraries log through klog, errors included: the
// benchmarks report what failed themselves. Output and stderr settings alone still let errors
// through (klog copies them to stderr above its threshold), such as client-go's "Unexpected
// error when reading response body" from every watch a mode's deadline cancels. With -v the
// user asked for those logs, and klog keeps them.
func silenceKlog(cmd *cobra.Command) {
	if verbosity(cmd) > 0 {
		return
	}
	klog.SetLogger(logr.Discard())
}

// addJSONAlias adds --json, the old spelling of -o json, hidden: scripts written for it keep
// working, and say on stderr what to write instead.
func addJSONAlias(cmd *cobra.Command, asJSON *bool) {
	cmd.Flags().BoolVar(asJSON, "json", false, "Print the figures as JSON")
	_ = cmd.Flags().MarkDeprecated("json", "use -o json")
}

// jsonAlias is the printer of -o, or of --json.
func jsonAlias(output *outputFlags, asJSON bool) (printers.ResourcePrinter, error) {
	if asJSON {
		if !output.text() && output.format != "json" {
			return nil, fmt.Errorf("--json and --output %q: give one", output.format)
		}
		output.format = "json"
	}
	return output.printer()
}

// printMemoryReport prints bench memory's figures, one a line.
func printMemoryReport(w io.Writer, rep *bench.MemoryReport) {
	mib := func(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	fmt.Fprintf(w, "memory: %d objects of each kind of the other plane\n", rep.Objects)
	fmt.Fprintf(w, "%-40s %s\n", "plane-a heap, empty cluster", mib(rep.EmptyHeapBytes))
	fmt.Fprintf(w, "%-40s %s (%.2fx empty)\n", "plane-a heap, plane-b's objects present", mib(rep.LoadedHeapBytes), rep.Ratio)
	fmt.Fprintf(w, "%-40s %s (%.2fx empty)\n", "plane-b heap (caches those objects)", mib(rep.OwnerHeapBytes), rep.OwnerRatioToEmpty)
}
