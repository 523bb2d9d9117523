package bench

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller"
	"cdplane/internal/controller/computedomain"
	"cdplane/internal/features"
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
	// TimedOut is set when the domain was not Ready within the timeout; Seconds is then the
	// timeout, a lower bound.
	TimedOut bool `json:"timed_out,omitempty"`
}

// Report is a whole run.
type Report struct {
	Nodes        int               `json:"nodes"`
	CliqueSize   int               `json:"clique_size"`
	Arrival      string            `json:"arrival"`
	FloorSeconds float64           `json:"floor_seconds"`
	Modes        map[string]Result `json:"modes"`
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

// Run measures the floor and then each mode against the apiserver at cfg (an administrator).
func Run(ctx context.Context, cfg *rest.Config, o Options) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	c, err := setupClient(cfg)
	if err != nil {
		return nil, err
	}
	if err := ensureRBAC(ctx, c); err != nil {
		return nil, err
	}
	rep := &Report{Nodes: o.Nodes, CliqueSize: o.CliqueSize, Arrival: o.Arrival, Modes: map[string]Result{}}
	prefix := fmt.Sprintf("bench-%d", time.Now().Unix()%100000)
	for i, mode := range append([]string{modeFloor}, o.Modes...) {
		fmt.Fprintf(o.Progress, "== %s: setting up %d nodes and daemon pods\n", mode, o.Nodes)
		res, err := runMode(ctx, cfg, c, fmt.Sprintf("%s-%d", prefix, i), mode, o)
		if err != nil {
			return rep, fmt.Errorf("mode %s: %w", mode, err)
		}
		fmt.Fprintf(o.Progress, "== %s: %.2fs, %.2f writes/daemon, %d controller writes, %v conflicts, %v throttled, p50 %.0fms p99 %.0fms\n",
			mode, res.Seconds, res.WritesPerDaemon, res.ControllerWrites, res.Conflicts, res.Throttled, res.P50Ms, res.P99Ms)
		if mode == modeFloor {
			rep.FloorSeconds = res.Seconds
			continue
		}
		if rep.FloorSeconds > 0 {
			res.RatioToFloor = res.Seconds / rep.FloorSeconds
		}
		rep.Modes[mode] = res
	}
	return rep, nil
}

// instance is one simulated daemon plus the kubelet's part for its node.
type instance struct {
	i       int
	daemon  *rest.Config
	kubelet *rest.Config
}

func runMode(ctx context.Context, cfg *rest.Config, admin client.Client, run, mode string, o Options) (Result, error) {
	w, err := newWorld(ctx, admin, run, o.Nodes, o.CliqueSize)
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if w != nil {
			w.cleanup(cctx, admin)
		}
	}()
	if err != nil {
		return Result{}, err
	}
	daemonWrites, ctrlWrites := &writeCounter{}, &writeCounter{}
	insts := make([]instance, o.Nodes)
	for i := range insts {
		du, dg := daemonUser(w.driverNS)
		nu, ng := nodeUser(w.nodes[i])
		insts[i] = instance{i: i,
			daemon:  identity(cfg, du, dg, daemonQPS, daemonBurst, daemonWrites),
			kubelet: identity(cfg, nu, ng, kubeletQPS, kubeletBurst, nil),
		}
	}

	mctx, stopMgr := context.WithCancel(ctx)
	defer stopMgr()
	mgrDone := make(chan error, 1)
	if mode == ModeCdplane || mode == ModeCdplaneGateOff {
		if err := startController(mctx, cfg, w, mode == ModeCdplane, ctrlWrites, mgrDone); err != nil {
			return Result{}, err
		}
	}

	before, err := readServerCounters(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	var (
		latMu   sync.Mutex
		lats    []time.Duration
		started = time.Now()
		failed  atomic.Pointer[error]
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
			err := runInstance(ictx, w, inst, mode, o)
			if err != nil && ictx.Err() == nil {
				failed.CompareAndSwap(nil, &err)
				return
			}
			latMu.Lock()
			lats = append(lats, time.Since(t0))
			latMu.Unlock()
		}()
	}

	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if p := failed.Load(); p != nil {
			return false, *p
		}
		return domainReady(ctx, admin, w, mode, o)
	})
	elapsed := time.Since(started)
	stopInstances()
	wg.Wait()
	stopMgr()
	if mode == ModeCdplane || mode == ModeCdplaneGateOff {
		if merr := <-mgrDone; merr != nil {
			return Result{}, fmt.Errorf("controller manager: %w", merr)
		}
	}
	timedOut := wait.Interrupted(err) && ctx.Err() == nil
	if err != nil && !timedOut {
		return Result{}, fmt.Errorf("waiting for the domain to be Ready: %w", err)
	}
	after, err := readServerCounters(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	res := Result{
		Seconds:          elapsed.Seconds(),
		WritesPerDaemon:  float64(daemonWrites.n.Load()) / float64(o.Nodes),
		ControllerWrites: ctrlWrites.n.Load(),
		Conflicts:        after.conflicts - before.conflicts,
		Throttled:        after.throttled - before.throttled,
		TimedOut:         timedOut,
	}
	res.P50Ms, res.P99Ms = percentile(lats, 50), percentile(lats, 99)
	return res, nil
}

func startController(ctx context.Context, cfg *rest.Config, w *world, cliques bool, counter *writeCounter, done chan<- error) error {
	gates := features.NewGates()
	if err := gates.SetFromMap(map[string]bool{string(features.ComputeDomainCliques): cliques}); err != nil {
		return err
	}
	ccfg := rest.CopyConfig(cfg)
	ccfg.QPS, ccfg.Burst = 200, 400 // the controller's defaults
	ccfg.Wrap(counter.wrap)
	mgr, err := controller.NewManager(ctx, ccfg, controller.Options{
		Options: computedomain.Options{
			DriverNamespace: w.driverNS, DaemonImage: "cdplane:bench", Gates: gates,
			DaemonFeatureGates: features.DaemonGates(gates),
		},
		SkipNameValidation: true,
		DomainSelector:     labels.SelectorFromSet(labels.Set{benchEnvLabel: w.run}),
	})
	if err != nil {
		return err
	}
	go func() { done <- mgr.Start(logrInto(ctx)) }()
	return nil
}

func logrInto(ctx context.Context) context.Context { return logr.NewContext(ctx, logr.Discard()) }

// domainReady reports whether the domain is Ready: its status for cdplane modes; for the peer
// protocols (no controller), all N entries Ready where that protocol keeps them.
func domainReady(ctx context.Context, c client.Client, w *world, mode string, o Options) (bool, error) {
	switch mode {
	case ModeCdplane, ModeCdplaneGateOff:
		cd := &cdv1beta1.ComputeDomain{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(w.cd), cd); err != nil {
			return false, err
		}
		return cd.Status.Status == cdv1beta1.StatusReady && int(cd.Status.ReadyNodes) == o.Nodes, nil
	case ModePeerLegacy:
		cd := &cdv1beta1.ComputeDomain{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(w.cd), cd); err != nil {
			return false, err
		}
		return countReady(nodeStatuses(cd.Status.Nodes)) == o.Nodes, nil
	case ModePeerCliques:
		list := &cdv1beta1.ComputeDomainCliqueList{}
		if err := c.List(ctx, list, client.InNamespace(w.driverNS)); err != nil {
			return false, err
		}
		ready := 0
		for _, cl := range list.Items {
			for _, d := range cl.Daemons {
				if d.Status == cdv1beta1.StatusReady {
					ready++
				}
			}
		}
		return ready == o.Nodes, nil
	default: // floor: every pod Ready
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(w.driverNS)); err != nil {
			return false, err
		}
		ready := 0
		for _, p := range pods.Items {
			if podReady(&p) {
				ready++
			}
		}
		return ready == o.Nodes, nil
	}
}

func nodeStatuses(nodes []cdv1beta1.ComputeDomainNode) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Status
	}
	return out
}

func countReady(statuses []string) int {
	n := 0
	for _, s := range statuses {
		if s == cdv1beta1.StatusReady {
			n++
		}
	}
	return n
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
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

type serverCounters struct{ conflicts, throttled float64 }

// readServerCounters reads the apiserver's own counts of 409 responses and of requests its
// priority-and-fairness rejected (429).
func readServerCounters(ctx context.Context, cfg *rest.Config) (serverCounters, error) {
	m, err := controlplane.ReadMetrics(ctx, cfg)
	if err != nil {
		return serverCounters{}, err
	}
	return serverCounters{
		conflicts: m.Sum("apiserver_request_total", map[string]string{"code": "409"}),
		throttled: m.Sum("apiserver_flowcontrol_rejected_requests_total", nil),
	}, nil
}
