package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller"
	"cdplane/internal/controller/computedomain"
	"cdplane/internal/features"
	"cdplane/internal/metrics"
	"cdplane/internal/sim/controlplane"
)

// Modes of the benchmark.
const (
	ModeCdplane        = "cdplane"
	ModeCdplaneGateOff = "cdplane-gate-off"
	ModePeerLegacy     = "peer-legacy"
	ModePeerCliques    = "peer-cliques"
	modeFloor          = "floor"
)

// AllModes lists the modes in the order they run.
var AllModes = []string{ModeCdplane, ModeCdplaneGateOff, ModePeerLegacy, ModePeerCliques}

// Options configure a run.
type Options struct {
	Nodes      int
	CliqueSize int
	// Arrival is "burst" (all instances start at once) or "ramp" (starts spread over Ramp).
	Arrival string
	Ramp    time.Duration
	Modes   []string
	Timeout time.Duration
	// Progress receives one line per phase; nil discards.
	Progress io.Writer
	// Runs is how many times the whole measurement (the floor and every mode) is made; the
	// report gives each run and a summary over them. Zero: one.
	Runs int
	// FreshCluster, when set, starts a control plane of its own for the floor and for each mode
	// of each run (and returns how to reach it and stop it), so that every mode starts on the
	// same empty cluster rather than on one still holding the previous modes' objects, and
	// Run's cfg is not used. The benchmark sets it when it starts its own control plane; it is
	// also what lets it read etcd's metrics.
	FreshCluster func(context.Context) (Cluster, error)
	// ProfileDir, when set, receives per mode a CPU profile of this process (every daemon
	// instance, and the controller when it runs here) over the whole registration,
	// <mode>.bench.pprof, one of the controller's process over its life, <mode>.controller.pprof,
	// and one of the kube-apiserver over its first ProfileSeconds, <mode>.apiserver.pprof.
	// Runs after the first name theirs <mode>-run<N>.*.pprof.
	ProfileDir     string
	ProfileSeconds int
	// BatchWindow is the controller's --batch-window (0: its default).
	BatchWindow time.Duration
	// ControllerCommand, when set, runs the cdplane modes' controller in a process of its own:
	// this command (`cdplane bench controller`) with ControllerArgs' flags. Unset: in this
	// process, sharing its scheduler with the daemon instances.
	ControllerCommand []string
	// MaxRSSGiB stops a mode once this process's resident memory, with the controller
	// process's, passes it (zero: no limit): a protocol whose every daemon receives every
	// change (gate off, peer-legacy) holds a copy of a domain of N entries per daemon, which at
	// tens of thousands of nodes is more than a machine has. The mode is then reported as not
	// finished, with how many joined.
	MaxRSSGiB float64
	// NodesNice is the nice value this process (the simulated nodes: every daemon instance and
	// kubelet) runs at, set by the caller before Run; Run only reports it, and when it is above
	// zero starts the controller process in a session of its own, which Linux schedules as a
	// group of its own at the default priority, as it does kube-apiserver and etcd: the
	// controller is the control plane's, not a node's. Zero: the controller process shares
	// this process's group, as before the option existed.
	NodesNice int
}

// Result is one mode's figures.
type Result struct {
	Seconds          float64 `json:"seconds"`
	WritesPerDaemon  float64 `json:"writes_per_daemon"`
	ControllerWrites int64   `json:"controller_writes"`
	Conflicts        float64 `json:"conflicts"`
	Throttled        float64 `json:"throttled"`
	P50Ms            float64 `json:"p50_ms"`
	P99Ms            float64 `json:"p99_ms"`
	RatioToFloor     float64 `json:"ratio_to_floor"`
	// Reconciles and ReconcileSeconds are the controller's passes over the domain during the
	// registration (those that computed its membership) and the time its reconciles took
	// together (cdplane modes; from the controller's step metric and controller-runtime's).
	Reconciles       float64 `json:"reconciles,omitempty"`
	ReconcileSeconds float64 `json:"reconcile_seconds,omitempty"`
	// ReconcileSteps splits ReconcileSeconds by step of the reconcile (resources, membership,
	// cliques, status: cdplane_computedomain_reconcile_step_seconds).
	ReconcileSteps map[string]float64 `json:"reconcile_steps,omitempty"`
	// Requests counts the apiserver's requests during the registration by "VERB resource"
	// (its apiserver_request_total), and WatchEvents the watch events it sent by resource
	// with their bytes (apiserver_watch_events_total, apiserver_watch_events_sizes).
	Requests        map[string]float64 `json:"requests,omitempty"`
	WatchEvents     map[string]float64 `json:"watch_events,omitempty"`
	WatchEventBytes map[string]float64 `json:"watch_event_bytes,omitempty"`
	// TerminatedWatchers counts, by resource, the watches the apiserver closed because their
	// client did not take the events as fast as they came (apiserver_terminated_watchers_total):
	// each such client lists or watches again, and sees nothing new until it has.
	TerminatedWatchers map[string]float64 `json:"terminated_watchers,omitempty"`
	// ThrottledBy splits Throttled by the apiserver's priority level.
	ThrottledBy map[string]float64 `json:"throttled_by_priority_level,omitempty"`
	// RequestMs is the mean time the apiserver took to answer a request, by "VERB resource" as
	// in Requests, watches left out (apiserver_request_duration_seconds); QueuedMs the mean time
	// a request waited in its priority level's queue before it was served, by priority level
	// (apiserver_flowcontrol_request_wait_duration_seconds, rejected requests included). Both
	// are over the requests of the registration.
	RequestMs map[string]float64 `json:"request_ms,omitempty"`
	QueuedMs  map[string]float64 `json:"queued_ms,omitempty"`
	// Joined is how many daemons had joined, over seconds since the start (one point per
	// change): pods Ready for the floor, entries Ready for the peer protocols, the domain's
	// ready nodes for cdplane. Plotted, not in the JSON.
	Joined []Sample `json:"-"`
	// LastHopMs is the last hop of a cdplane mode: from the last daemon pod's Ready (the
	// kubelet's patch returned) to the domain's status first showing Ready; LastHopFromSeenMs
	// the same from the controller's cache first showing that pod Ready. What the domain's
	// users wait for after the last daemon is up: the controller's pass and status write.
	// Absent for the floor, the peer modes and a mode that did not finish.
	LastHopMs         *float64 `json:"last_hop_ms,omitempty"`
	LastHopFromSeenMs *float64 `json:"last_hop_from_seen_ms,omitempty"`
	// TimedOut is set when the domain was not Ready within the timeout; Seconds is then the
	// timeout, a lower bound.
	TimedOut bool `json:"timed_out,omitempty"`
	// StoppedBy says what ended a mode that did not finish: "timeout" or "memory" (this
	// process's resident memory passed Options.MemoryLimit).
	StoppedBy string `json:"stopped_by,omitempty"`
	// PeakRSSBytes is the highest resident memory of this process and the controller's seen
	// during the mode (sampled every second): the controller and every daemon instance together.
	PeakRSSBytes uint64 `json:"peak_rss_bytes,omitempty"`
	// SchedLatency is how long this process's goroutines (every daemon instance, and the
	// controller in the cdplane modes) waited to run during the mode.
	SchedLatency *SchedLatency `json:"sched_latency,omitempty"`
	// JoinedAtEnd is how many daemons had joined when the mode ended: all of them, unless it
	// timed out.
	JoinedAtEnd int `json:"joined"`
	// Phases is when the instances got through each step of their registration, and
	// InstancesRetrying how many had at least one of their daemon's calls fail (and retried).
	Phases            []Phase `json:"phases,omitempty"`
	InstancesRetrying int     `json:"instances_retrying"`
	// APIServerCPUSeconds and EtcdCPUSeconds are the CPU time kube-apiserver and etcd spent
	// during the registration (the growth of each one's process_cpu_seconds_total), and
	// EtcdWALBytes what etcd wrote to its write-ahead log (etcd_disk_wal_write_bytes_total):
	// what the mode cost the control plane, which unlike its time does not depend on how busy
	// the machine was. Absent where they could not be read: etcd's on a cluster given with
	// --kubeconfig, whose etcd the benchmark cannot reach.
	APIServerCPUSeconds *float64 `json:"apiserver_cpu_seconds,omitempty"`
	EtcdCPUSeconds      *float64 `json:"etcd_cpu_seconds,omitempty"`
	EtcdWALBytes        *float64 `json:"etcd_wal_write_bytes,omitempty"`
	// CliqueWatchBytesLeast is the fewest clique watch bytes the registration could have cost
	// (every daemon receiving its final clique once: see cliqueWatchLeast), from the cliques at
	// the end of the mode, and CliqueWatchBytesOverLeast the clique watch bytes sent
	// (WatchEventBytes' computedomaincliques, the controller's watch included) over it. Only
	// in the cdplane mode: the floor and cdplane-gate-off end without cliques, and the peer
	// protocols' daemons watch none.
	CliqueWatchBytesLeast     float64  `json:"clique_watch_bytes_least,omitempty"`
	CliqueWatchBytesOverLeast *float64 `json:"clique_watch_bytes_over_least,omitempty"`
	// Cost is each cost figure (CostFigures) beside the floor's of the same run, and
	// RequestCost the requests by "VERB resource" so (absent for the floor itself).
	Cost        map[string]Figure `json:"cost,omitempty"`
	RequestCost map[string]Figure `json:"request_cost,omitempty"`
}

// Sample is a count at a time, in seconds since the mode started.
type Sample struct {
	Seconds float64
	Count   int
}

// Report is a whole run.
type Report struct {
	Nodes      int    `json:"nodes"`
	CliqueSize int    `json:"clique_size"`
	Arrival    string `json:"arrival"`
	// NodesNice is Options.NodesNice: the simulated nodes' CPU priority below the control
	// plane's (0: the same).
	NodesNice int `json:"nodes_nice,omitempty"`
	// FloorSeconds, Floor (the floor's own figures) and Modes are the first run's, where a
	// report of one run had them, so that what reads those reports reads these too.
	FloorSeconds float64           `json:"floor_seconds"`
	Floor        Result            `json:"floor"`
	Modes        map[string]Result `json:"modes"`
	// Runs holds every run, the first included; Summary each mode's figures over them, and the
	// floor's under "floor".
	Runs    []RunReport        `json:"runs,omitempty"`
	Summary map[string]Summary `json:"summary,omitempty"`
	// EtcdMeasured says whether the etcd figures were read (not on a cluster given with
	// --kubeconfig).
	EtcdMeasured bool `json:"etcd_measured"`
}

// Validate checks the options and names the first problem.
func (o *Options) Validate() error {
	switch {
	case o.Nodes < 1:
		return fmt.Errorf("--nodes must be at least 1, got %d", o.Nodes)
	case o.CliqueSize < 1 || o.CliqueSize > cdv1beta1.MaxDaemonsPerClique:
		return fmt.Errorf("--clique-size must be between 1 and %d, got %d", cdv1beta1.MaxDaemonsPerClique, o.CliqueSize)
	case o.Arrival != "burst" && o.Arrival != "ramp":
		return fmt.Errorf("--arrival must be burst or ramp, got %q", o.Arrival)
	case o.MaxRSSGiB < 0:
		return fmt.Errorf("--max-rss-gib must not be negative, got %g", o.MaxRSSGiB)
	case o.BatchWindow < 0:
		return fmt.Errorf("--batch-window must not be negative, got %v", o.BatchWindow)
	case o.Runs < 0:
		return fmt.Errorf("--runs must be at least 1, got %d", o.Runs)
	}
	for _, m := range o.Modes {
		switch m {
		case ModeCdplane, ModeCdplaneGateOff, ModePeerLegacy, ModePeerCliques:
		default:
			return fmt.Errorf("unknown mode %q: want one of %v", m, AllModes)
		}
	}
	return nil
}

// Run measures the floor and then each mode against the apiserver at cfg (an administrator),
// o.Runs times. Each mode's costs are compared with the floor's of the same run: runs on a
// shared machine differ in how busy it was, and a ratio within a run cancels much of that.
func Run(ctx context.Context, cfg *rest.Config, o Options) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	runs := max(o.Runs, 1)
	rep := &Report{Nodes: o.Nodes, CliqueSize: o.CliqueSize, Arrival: o.Arrival, NodesNice: o.NodesNice, Modes: map[string]Result{}}
	prefix := fmt.Sprintf("bench-%d", time.Now().Unix()%100000)
	for r := 1; r <= runs; r++ {
		run := RunReport{Modes: map[string]Result{}}
		for i, mode := range append([]string{modeFloor}, o.Modes...) {
			t := tag{progress: fmt.Sprintf("run %d/%d: mode %s", r, runs, mode), profile: mode}
			if r > 1 {
				t.profile = fmt.Sprintf("%s-run%d", mode, r)
			}
			res, err := runOn(ctx, cfg, fmt.Sprintf("%s-%d-%d", prefix, r, i), mode, t, o)
			if err != nil {
				return rep, fmt.Errorf("run %d, mode %s: %w", r, mode, err)
			}
			fmt.Fprintf(o.Progress, "== %s: %.2fs, %.2f writes/daemon, %d controller writes, %v conflicts, %v throttled, p50 %.0fms p99 %.0fms\n",
				t.progress, res.Seconds, res.WritesPerDaemon, res.ControllerWrites, res.Conflicts, res.Throttled, res.P50Ms, res.P99Ms)
			if l := res.SchedLatency; l != nil {
				fmt.Fprintf(o.Progress, "== %s: this process's goroutines waited to run p50 %.2fms p90 %.2fms p99 %.2fms\n", t.progress, l.P50Ms, l.P90Ms, l.P99Ms)
			}
			if res.APIServerCPUSeconds != nil && res.EtcdCPUSeconds != nil && res.EtcdWALBytes != nil {
				fmt.Fprintf(o.Progress, "== %s: kube-apiserver %.2f CPU seconds, etcd %.2f CPU seconds and %.1f MiB written to its log\n",
					t.progress, *res.APIServerCPUSeconds, *res.EtcdCPUSeconds, *res.EtcdWALBytes/(1<<20))
			}
			if mode == modeFloor {
				run.FloorSeconds, run.Floor = res.Seconds, res
				continue
			}
			if run.FloorSeconds > 0 {
				res.RatioToFloor = res.Seconds / run.FloorSeconds
			}
			res.Cost, res.RequestCost = costs(res, run.Floor)
			run.Modes[mode] = res
		}
		rep.Runs = append(rep.Runs, run)
		if r == 1 {
			rep.FloorSeconds, rep.Floor, rep.Modes = run.FloorSeconds, run.Floor, run.Modes
			rep.EtcdMeasured = run.Floor.EtcdCPUSeconds != nil
		}
	}
	rep.Summary = summarizeRuns(rep.Runs)
	return rep, nil
}

// tag names a mode of a run: in the progress lines, and in the profiles' file names.
type tag struct{ progress, profile string }

// runOn runs one mode on cfg's cluster, or on a fresh one when o.FreshCluster is set.
func runOn(ctx context.Context, cfg *rest.Config, run, mode string, t tag, o Options) (Result, error) {
	cl := Cluster{Config: cfg}
	if o.FreshCluster != nil {
		fresh, err := o.FreshCluster(ctx)
		if err != nil {
			return Result{}, err
		}
		if fresh.Stop != nil {
			defer fresh.Stop()
		}
		cl = fresh
	}
	c, err := setupClient(cl.Config)
	if err != nil {
		return Result{}, err
	}
	if err := ensureRBAC(ctx, c); err != nil {
		return Result{}, err
	}
	fmt.Fprintf(o.Progress, "== %s: setting up %d nodes and daemon pods\n", t.progress, o.Nodes)
	return runMode(ctx, cl, c, run, mode, t, o)
}

// errMemoryLimit stops a mode whose instances hold more memory than Options.MaxRSSGiB.
var errMemoryLimit = errors.New("the benchmark's memory limit was reached")

// instance is one simulated daemon plus the kubelet's part for its node.
type instance struct {
	i       int
	daemon  *rest.Config
	kubelet *rest.Config
}

func runMode(ctx context.Context, cl Cluster, admin client.Client, run, mode string, t tag, o Options) (Result, error) {
	cfg := cl.Config
	w, err := newWorld(ctx, admin, run, o.Nodes, o.CliqueSize)
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if w != nil && o.FreshCluster == nil { // a fresh cluster goes with everything in it
			w.cleanup(cctx, admin)
		}
	}()
	if err != nil {
		return Result{}, err
	}
	daemonWrites := &writeCounter{}
	shared, err := sharedTransport(cfg)
	if err != nil {
		return Result{}, err
	}
	defer closeSharedTransport(cfg)
	insts := make([]instance, o.Nodes)
	traces := make([]*trace, o.Nodes)
	for i := range insts {
		du, dg := daemonUser(w.driverNS)
		nu, ng := nodeUser(w.nodes[i])
		insts[i] = instance{i: i,
			daemon:  onTransport(identity(cfg, du, dg, daemonQPS, daemonBurst, daemonWrites), shared),
			kubelet: onTransport(identity(cfg, nu, ng, kubeletQPS, kubeletBurst, nil), shared),
		}
	}

	mctx, stopMgr := context.WithCancel(ctx)
	defer stopMgr()
	var ctl modeController
	if mode == ModeCdplane || mode == ModeCdplaneGateOff {
		if ctl, err = startModeController(mctx, cfg, w, t.profile, mode, o); err != nil {
			return Result{}, err
		}
		defer func() {
			if ctl != nil { // not stopped below: an error ended the mode
				_, _ = ctl.stop(time.Minute)
			}
		}()
	}

	var domain *domainWatch
	if mode == ModeCdplane || mode == ModeCdplaneGateOff {
		if domain, err = watchDomain(mctx, cfg, w.cd); err != nil {
			return Result{}, err
		}
		// In a cluster, daemons start only after the controller's first pass over the domain
		// (it creates their DaemonSet): the clock starts once that pass wrote the status, not
		// while the controller is still starting, listing the cluster into its cache next to
		// thousands of daemons' first requests.
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
			return domain.hasBeenTaken(), ctl.running()
		}); err != nil {
			return Result{}, fmt.Errorf("waiting for the controller's first pass over the domain: %w", err)
		}
	}
	before, err := readServerCounters(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	etcdBefore, err := readEtcdCounters(ctx, cl)
	if err != nil {
		return Result{}, err
	}
	if ctl != nil {
		ctl.markStart()
	}
	schedBefore := schedLatencies()
	stopProfiles, err := startProfiles(ctx, cfg, o, t.profile)
	if err != nil {
		return Result{}, err
	}
	var (
		latMu   sync.Mutex
		lats    []time.Duration
		started = time.Now()
		failed  atomic.Pointer[error]
		// joined counts, for the floor and the peer protocols, the daemons that have joined
		// (their pod Ready, their entry written Ready): counted where it happens, so that
		// measuring does not load the apiserver with lists of thousands of objects.
		joined  = &atomic.Int64{}
		samples = []Sample{{Seconds: 0, Count: 0}}
	)
	ictx, stopInstances := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, inst := range insts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if o.Arrival == "ramp" && o.Nodes > 1 {
				select {
				case <-time.After(time.Duration(int64(o.Ramp) * int64(inst.i) / int64(o.Nodes-1))):
				case <-ictx.Done():
					return
				}
			}
			t0 := time.Now()
			tr := newTrace()
			traces[inst.i] = tr
			err := runInstance(ictx, w, inst, mode, o, joined, tr)
			if err != nil && ictx.Err() == nil {
				failed.CompareAndSwap(nil, &err)
				return
			}
			latMu.Lock()
			lats = append(lats, time.Since(t0))
			latMu.Unlock()
			if mode == modeFloor {
				joined.Add(1) // the instance returns once its pod is Ready
			}
		}()
	}

	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	var (
		polls     int
		peakRSS   uint64
		overLimit bool
	)
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if p := failed.Load(); p != nil {
			return false, *p
		}
		if ctl != nil {
			if err := ctl.running(); err != nil {
				return false, err
			}
		}
		if polls++; polls%20 == 1 {
			if rss, err := controlplane.ResidentMemory(os.Getpid()); err == nil {
				if ctl != nil {
					rss += ctl.rss()
				}
				peakRSS = max(peakRSS, rss)
				if o.MaxRSSGiB > 0 && float64(rss) > o.MaxRSSGiB*(1<<30) {
					overLimit = true
					return false, errMemoryLimit
				}
			}
		}
		n, done := joinedCount(domain, o.Nodes, joined)
		if polls%200 == 0 { // every 10 s
			fmt.Fprintf(o.Progress, "== %s: %d of %d joined after %.0fs (this process: %.1f GiB resident at most)\n",
				t.progress, n, o.Nodes, time.Since(started).Seconds(), float64(peakRSS)/(1<<30))
		}
		if n != samples[len(samples)-1].Count {
			samples = append(samples, Sample{Seconds: time.Since(started).Seconds(), Count: n})
		}
		return done, nil
	})
	elapsed := time.Since(started)
	schedAfter := schedLatencies()
	if perr := stopProfiles(); perr != nil {
		fmt.Fprintf(o.Progress, "== %s: profile: %v\n", t.progress, perr)
	}
	stopInstances()
	wg.Wait()
	// What the instances held goes before the next mode starts, so that each mode's peak is
	// its own.
	defer debug.FreeOSMemory()
	var ctlRep controllerReport
	if ctl != nil {
		rep, cerr := ctl.stop(time.Minute)
		ctl = nil
		if cerr != nil {
			return Result{}, cerr
		}
		ctlRep = rep
	}
	stopMgr()
	timedOut := (wait.Interrupted(err) && ctx.Err() == nil) || overLimit
	if err != nil && !timedOut {
		return Result{}, fmt.Errorf("waiting for the domain to be Ready: %w", err)
	}
	after, err := readServerCounters(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	etcdAfter, err := readEtcdCounters(ctx, cl)
	if err != nil {
		return Result{}, err
	}
	res := Result{
		Seconds:             elapsed.Seconds(),
		WritesPerDaemon:     float64(daemonWrites.n.Load()) / float64(o.Nodes),
		ControllerWrites:    ctlRep.Writes,
		Conflicts:           after.conflicts - before.conflicts,
		Throttled:           after.throttled - before.throttled,
		ThrottledBy:         after.throttledSince(before),
		Requests:            delta(after.requests, before.requests),
		WatchEvents:         delta(after.watchEvents, before.watchEvents),
		WatchEventBytes:     delta(after.watchBytes, before.watchBytes),
		TerminatedWatchers:  delta(after.terminatedWatchers, before.terminatedWatchers),
		RequestMs:           after.requestTime.meanMsSince(before.requestTime),
		QueuedMs:            after.queueTime.meanMsSince(before.queueTime),
		TimedOut:            timedOut,
		Joined:              samples,
		PeakRSSBytes:        peakRSS,
		SchedLatency:        schedLatencySince(schedBefore, schedAfter),
		APIServerCPUSeconds: growth(before.cpuSeconds, after.cpuSeconds),
		EtcdCPUSeconds:      growth(etcdBefore.cpuSeconds, etcdAfter.cpuSeconds),
		EtcdWALBytes:        growth(etcdBefore.walBytes, etcdAfter.walBytes),
	}
	// Read after the counters, so that the list is not counted in the registration's requests.
	// Only cdplane's daemons watch their clique (peer-cliques' read theirs with GETs).
	if domain != nil {
		if res.CliqueWatchBytesLeast, err = finalCliquesLeast(ctx, cfg, w, o.CliqueSize); err != nil {
			return Result{}, err
		}
	}
	if res.CliqueWatchBytesLeast > 0 {
		r := res.WatchEventBytes[cliqueResource] / res.CliqueWatchBytesLeast
		res.CliqueWatchBytesOverLeast = &r
	}
	switch {
	case overLimit:
		res.StoppedBy = "memory"
	case timedOut:
		res.StoppedBy = "timeout"
	}
	res.P50Ms, res.P99Ms = percentile(lats, 50), percentile(lats, 99)
	res.JoinedAtEnd = samples[len(samples)-1].Count
	seen := newPodsSeen()
	seen.merge(ctlRep.Seen)
	seen.markInto(traces, w)
	res.Phases, res.InstancesRetrying = summarize(traces)
	if domain != nil && !timedOut {
		res.LastHopMs, res.LastHopFromSeenMs = lastHop(domain.firstReady(), traces)
	}
	if domain != nil {
		res.Reconciles, res.ReconcileSeconds, res.ReconcileSteps = ctlRep.Reconciles, ctlRep.ReconcileSeconds, ctlRep.Steps
	}
	return res, nil
}

// startModeController starts the controller of a cdplane mode: in a process of its own when
// o.ControllerCommand is set, else in this one.
func startModeController(ctx context.Context, cfg *rest.Config, w *world, profile, mode string, o Options) (modeController, error) {
	a := ControllerArgs{DriverNamespace: w.driverNS, Run: w.run, Cliques: mode == ModeCdplane, BatchWindow: o.BatchWindow}
	if len(o.ControllerCommand) == 0 {
		c, err := startInProcessController(ctx, cfg, a)
		if err != nil {
			return nil, err // not a nil *inProcessController in a non-nil interface
		}
		return c, nil
	}
	if o.ProfileDir != "" {
		a.CPUProfile = filepath.Join(o.ProfileDir, profile+".controller.pprof")
	}
	dir, err := os.MkdirTemp("", "cdplane-bench-controller-")
	if err != nil {
		return nil, err
	}
	p, err := startControllerProcess(o.ControllerCommand, cfg, dir, a, o.NodesNice > 0)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &cleanedUp{modeController: p, dir: dir}, nil
}

// cleanedUp removes the controller process's directory (its kubeconfig) once it stopped.
type cleanedUp struct {
	modeController
	dir string
}

func (c *cleanedUp) stop(timeout time.Duration) (controllerReport, error) {
	defer func() { _ = os.RemoveAll(c.dir) }()
	return c.modeController.stop(timeout)
}

func startController(ctx context.Context, cfg *rest.Config, driverNS, run string, cliques bool, batchWindow time.Duration, counter *writeCounter, done chan<- error, seen *podsSeen) error {
	gates := features.NewGates()
	if err := gates.SetFromMap(map[string]bool{string(features.ComputeDomainCliques): cliques}); err != nil {
		return err
	}
	user, groups := controllerUser()
	ccfg := identity(cfg, user, groups, 200, 400, counter) // the controller's QPS and burst defaults
	mgr, err := controller.NewManager(ctx, ccfg, controller.Options{
		Options: computedomain.Options{
			DriverNamespace: driverNS, DaemonImage: "cdplane:bench", Gates: gates,
			DaemonFeatureGates: features.DaemonGates(gates), BatchWindow: batchWindow,
			CliqueWritten: seen.written,
		},
		SkipNameValidation: true,
		DomainSelector:     labels.SelectorFromSet(labels.Set{benchEnvLabel: run}),
	})
	if err != nil {
		return err
	}
	// The pods' informer is the controller's own (it watches the daemon pods): the handler
	// only notes when the controller's cache first showed each pod labelled, and Ready.
	inf, err := mgr.GetCache().GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    seen.observe,
		UpdateFunc: func(_, obj any) { seen.observe(obj) },
	}); err != nil {
		return err
	}
	go func() { done <- mgr.Start(logrInto(ctx)) }()
	return nil
}

// podsSeen records when the controller's cache first showed each daemon pod with its clique
// label (the phase "seen", between the daemon's label and its clique naming it) and first
// showed it Ready (the phase "ready_seen", between the kubelet's Ready patch and the domain's
// status counting the node), by pod name; and when the controller's write of a clique first
// named each node returned (the phase "written", between seen and the daemon reading its
// clique: it tells the controller's pass from the watch's delivery), by node name.
type podsSeen struct {
	mu sync.Mutex
	at map[string]map[string]time.Time // phase -> pod (node for written) -> first sighting
}

func newPodsSeen() *podsSeen {
	return &podsSeen{at: map[string]map[string]time.Time{phaseSeen: {}, phaseWritten: {}, phaseReadySeen: {}}}
}

// written notes the nodes a clique just written names (computedomain.Options.CliqueWritten).
func (s *podsSeen) written(c *cdv1beta1.ComputeDomainClique) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range c.Daemons {
		s.firstLocked(phaseWritten, d.NodeName, now)
	}
}

func (s *podsSeen) observe(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	_, labelled := p.Labels[cdv1beta1.CliqueIDLabel]
	ready := slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	})
	if !labelled && !ready {
		return
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if labelled {
		s.firstLocked(phaseSeen, p.Name, now)
	}
	if ready {
		s.firstLocked(phaseReadySeen, p.Name, now)
	}
}

// firstLocked records at as pod's first sighting in phase unless an earlier one was recorded.
// s.mu is held.
func (s *podsSeen) firstLocked(phase, pod string, at time.Time) {
	if prev, ok := s.at[phase][pod]; !ok || at.Before(prev) {
		s.at[phase][pod] = at
	}
}

// byName returns the sightings as Unix nanoseconds, for the controller process's report.
func (s *podsSeen) byName() map[string]map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]map[string]int64{}
	for phase, at := range s.at {
		out[phase] = make(map[string]int64, len(at))
		for pod, t := range at {
			out[phase][pod] = t.UnixNano()
		}
	}
	return out
}

// merge adds the sightings of a controller process's report.
func (s *podsSeen) merge(seen map[string]map[string]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for phase, at := range seen {
		if _, known := s.at[phase]; !known {
			continue
		}
		for pod, ns := range at {
			s.firstLocked(phase, pod, time.Unix(0, ns))
		}
	}
}

// markInto sets the seen, written and ready_seen phases of the trace of each of w's instances
// (nothing on a nil s).
func (s *podsSeen) markInto(traces []*trace, w *world) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, p := range w.pods {
		if i >= len(traces) || traces[i] == nil {
			continue
		}
		for phase, at := range s.at {
			key := p.Name
			if phase == phaseWritten {
				key = p.Spec.NodeName
			}
			if t, ok := at[key]; ok {
				traces[i].markAt(phase, t)
			}
		}
	}
}

func logrInto(ctx context.Context) context.Context { return logr.NewContext(ctx, logr.Discard()) }

// joinedCount returns how many daemons have joined and whether all n have: for cdplane modes
// (domain set) the domain's ready nodes, and done once the domain is Ready with all of them; for
// the others the in-process count.
func joinedCount(domain *domainWatch, n int, joined *atomic.Int64) (int, bool) {
	if domain == nil {
		got := int(joined.Load())
		return got, got == n
	}
	ready, isReady := domain.state()
	return ready, isReady && ready == n
}

// domainWatch follows one ComputeDomain's status through a watch: polling it with GETs would
// read thousands of status entries from etcd many times a second, load the apiserver cdplane is
// measured on, and tilt the comparison (it did; see docs/scale.md, "Design choices and what was
// measured").
type domainWatch struct {
	mu      sync.Mutex
	ready   int
	isReady bool
	// readyAt is when the watch first showed the domain Ready (zero until then).
	readyAt time.Time
	// taken: the controller has written the domain's status once (its first pass is done).
	taken bool
}

func (d *domainWatch) state() (int, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ready, d.isReady
}

func (d *domainWatch) observe(obj any) {
	cd, ok := obj.(*cdv1beta1.ComputeDomain)
	if !ok {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ready, d.isReady = int(cd.Status.ReadyNodes), cd.Status.Status == cdv1beta1.StatusReady
	if d.isReady && d.readyAt.IsZero() {
		d.readyAt = time.Now()
	}
	d.taken = d.taken || cd.Status.Status != ""
}

// firstReady is when the watch first showed the domain Ready; zero if it did not.
func (d *domainWatch) firstReady() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.readyAt
}

func (d *domainWatch) hasBeenTaken() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.taken
}

// watchDomain starts following cd until ctx ends, and waits for the watch to have synced.
func watchDomain(ctx context.Context, cfg *rest.Config, cd *cdv1beta1.ComputeDomain) (*domainWatch, error) {
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	sel := fields.OneTermEqualSelector("metadata.name", cd.Name).String()
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			l := &cdv1beta1.ComputeDomainList{}
			opts.FieldSelector = sel
			return l, c.List(ctx, l, &client.ListOptions{Namespace: cd.Namespace, Raw: &opts})
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = sel
			return c.Watch(ctx, &cdv1beta1.ComputeDomainList{}, &client.ListOptions{Namespace: cd.Namespace, Raw: &opts})
		},
	}
	d := &domainWatch{}
	_, ctrl := toolscache.NewInformerWithOptions(toolscache.InformerOptions{
		ListerWatcher: lw, ObjectType: &cdv1beta1.ComputeDomain{},
		Handler: toolscache.ResourceEventHandlerFuncs{
			AddFunc:    d.observe,
			UpdateFunc: func(_, obj any) { d.observe(obj) },
		},
	})
	go ctrl.RunWithContext(ctx)
	if !toolscache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
		return nil, fmt.Errorf("watching ComputeDomain %s/%s: %w", cd.Namespace, cd.Name, ctx.Err())
	}
	return d, nil
}

func percentile(d []time.Duration, p int) float64 {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	idx := (len(s)*p + 99) / 100
	if idx < 1 {
		idx = 1
	}
	return float64(s[idx-1].Microseconds()) / 1000
}

type serverCounters struct {
	conflicts, throttled float64
	// cpuSeconds is the apiserver's process_cpu_seconds_total; nil when it exports none.
	cpuSeconds *float64
	// throttledBy is throttled by priority level.
	throttledBy map[string]float64
	// requests by "VERB resource", watch events and their bytes by resource.
	requests, watchEvents, watchBytes map[string]float64
	// terminatedWatchers by resource.
	terminatedWatchers map[string]float64
	// requestTime is the time requests took by "VERB resource" (watches left out), queueTime
	// the time they waited in their priority level's queue by level.
	requestTime, queueTime durations
}

// durations sums histograms' samples by key: their count and their sum in seconds.
type durations struct{ count, seconds map[string]float64 }

func newDurations() durations {
	return durations{count: map[string]float64{}, seconds: map[string]float64{}}
}

func (d durations) add(key string, h *dto.Histogram) {
	d.count[key] += float64(h.GetSampleCount())
	d.seconds[key] += h.GetSampleSum()
}

// meanMsSince returns, by key, the mean in milliseconds of the samples added since before,
// omitting keys without new samples.
func (d durations) meanMsSince(before durations) map[string]float64 {
	out := map[string]float64{}
	for k, n := range d.count {
		if dn := n - before.count[k]; dn > 0 {
			out[k] = math.Round((d.seconds[k]-before.seconds[k])/dn*1e6) / 1e3
		}
	}
	return out
}

// throttledSince returns the rejections by priority level since before, omitting levels that
// rejected nothing.
func (c serverCounters) throttledSince(before serverCounters) map[string]float64 {
	return delta(c.throttledBy, before.throttledBy)
}

// delta returns after - before per key, omitting keys that did not grow.
func delta(after, before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, n := range after {
		if d := n - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// readServerCounters reads the apiserver's own counts of 409 responses, of requests its
// priority-and-fairness rejected (429), of requests by verb and resource, and of watch events.
func readServerCounters(ctx context.Context, cfg *rest.Config) (serverCounters, error) {
	m, err := controlplane.ReadMetrics(ctx, cfg)
	if err != nil {
		return serverCounters{}, err
	}
	c := serverCounters{
		conflicts:   m.Sum("apiserver_request_total", map[string]string{"code": "409"}),
		throttled:   m.Sum("apiserver_flowcontrol_rejected_requests_total", nil),
		throttledBy: map[string]float64{}, requests: map[string]float64{},
		watchEvents: map[string]float64{}, watchBytes: map[string]float64{},
		terminatedWatchers: map[string]float64{},
		requestTime:        newDurations(), queueTime: newDurations(),
		cpuSeconds: counterOf(m, "process_cpu_seconds_total"),
	}
	each := func(name string, fn func(labels map[string]string, s *dto.Metric)) {
		fam := m[name]
		if fam == nil {
			return
		}
		for _, s := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			fn(labels, s)
		}
	}
	each("apiserver_flowcontrol_rejected_requests_total", func(l map[string]string, s *dto.Metric) {
		c.throttledBy[l["priority_level"]] += s.GetCounter().GetValue()
	})
	requestKey := func(l map[string]string) string {
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		return key
	}
	each("apiserver_request_total", func(l map[string]string, s *dto.Metric) {
		c.requests[requestKey(l)] += s.GetCounter().GetValue()
	})
	each("apiserver_request_duration_seconds", func(l map[string]string, s *dto.Metric) {
		if l["verb"] != "WATCH" {
			c.requestTime.add(requestKey(l), s.GetHistogram())
		}
	})
	each("apiserver_flowcontrol_request_wait_duration_seconds", func(l map[string]string, s *dto.Metric) {
		c.queueTime.add(l["priority_level"], s.GetHistogram())
	})
	each("apiserver_watch_events_total", func(l map[string]string, s *dto.Metric) {
		c.watchEvents[l["resource"]] += s.GetCounter().GetValue()
	})
	each("apiserver_watch_events_sizes", func(l map[string]string, s *dto.Metric) {
		c.watchBytes[l["resource"]] += s.GetHistogram().GetSampleSum()
	})
	each("apiserver_terminated_watchers_total", func(l map[string]string, s *dto.Metric) {
		c.terminatedWatchers[l["resource"]] += s.GetCounter().GetValue()
	})
	return c, nil
}

// reconcileTotals reads the count of the computedomain controller's passes (those that computed
// membership: a reconcile that only finds its domain resting is not one) and the summed seconds
// of its reconciles from controller-runtime's registry (the in-process controller's), and the
// seconds of each step.
func reconcileTotals() (count, seconds float64, steps map[string]float64) {
	steps = map[string]float64{}
	fams, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return 0, 0, steps
	}
	for _, f := range fams {
		switch f.GetName() {
		case "controller_runtime_reconcile_time_seconds":
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "controller" && l.GetValue() == "computedomain" {
						seconds += m.GetHistogram().GetSampleSum()
					}
				}
			}
		case metrics.ReconcileStepName:
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == metrics.LabelStep {
						steps[l.GetValue()] += m.GetHistogram().GetSampleSum()
						if l.GetValue() == metrics.ReconcileStepMembership {
							count += float64(m.GetHistogram().GetSampleCount())
						}
					}
				}
			}
		}
	}
	return count, seconds, steps
}
