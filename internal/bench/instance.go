package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/daemon"
	"cdplane/internal/imex"
)

var (
	mapperMu sync.Mutex
	mappers  = map[string]meta.RESTMapper{}
)

// newClient returns a client for cfg sharing one REST mapper per apiserver, so that thousands of
// instances do not each run discovery.
func newClient(cfg *rest.Config) (client.WithWatch, error) {
	mapperMu.Lock()
	key := clusterKey(cfg)
	m, ok := mappers[key]
	if !ok {
		var err error
		if m, err = newMapper(cfg); err != nil {
			mapperMu.Unlock()
			return nil, err
		}
		mappers[key] = m
	}
	mapperMu.Unlock()
	return client.NewWithWatch(cfg, client.Options{Scheme: newScheme(), Mapper: m})
}

// clusterKey names the cluster cfg reaches: its address and the CA it trusts, or the shared
// transport (one per cluster) that carries that CA. A fresh control plane may come up on the
// port a stopped one used, but never with its CA, so a mapper (which keeps its own HTTP client)
// is not reused across clusters.
func clusterKey(cfg *rest.Config) string {
	if cfg.Transport != nil {
		return fmt.Sprintf("%s|transport %p", cfg.Host, cfg.Transport)
	}
	sum := sha256.Sum256(append([]byte(cfg.CAFile+"\x00"), cfg.CAData...))
	return cfg.Host + "|" + hex.EncodeToString(sum[:8])
}

// runInstance plays one node: the kubelet starts the pod (IP), the daemon registers by the
// mode's protocol, and the kubelet marks the pod Ready once the daemon's check passes. It
// returns once the pod is Ready.
func runInstance(ctx context.Context, w *world, inst instance, mode string, o Options, joined *atomic.Int64, tr *trace) error {
	kc, err := newClient(inst.kubelet)
	if err != nil {
		return err
	}
	raw, err := newClient(inst.daemon)
	if err != nil {
		return err
	}
	var dc client.WithWatch = tracedClient{WithWatch: raw, t: tr, node: w.nodes[inst.i]}
	pod := w.pods[inst.i].DeepCopy()
	ip := w.ip(inst.i)
	if err := setPodStatus(ctx, kc, pod, ip, false); err != nil {
		return err
	}
	tr.mark(phaseRunning)
	cfg := daemon.Config{
		NodeName: w.nodes[inst.i], PodIP: ip, PodName: pod.Name, PodNamespace: pod.Namespace, PodUID: string(pod.UID),
		CliqueID: w.clique(inst.i, o.CliqueSize), CDUID: string(w.cd.UID), CDName: w.cd.Name, CDNamespace: w.cd.Namespace,
		MaxNodes: o.CliqueSize, DNSNames: true, Cliques: mode == ModeCdplane,
	}
	x := &instantIMEX{}
	switch mode {
	case ModeCdplane, ModeCdplaneGateOff:
		dir, err := os.MkdirTemp(daemonDirRoot(), "cdplane-bench-")
		if err != nil {
			return err
		}
		cfg.ConfigDir, cfg.HostsPath = dir, dir+"/hosts"
		// The daemon outlives this function (it runs until the benchmark ends): its directory
		// goes when it returns, not before, or its writes would recreate it.
		go func() {
			_ = daemon.Serve(ctx, cfg, daemon.Deps{Client: dc, IMEX: x, Log: logr.Discard()})
			_ = os.RemoveAll(dir)
		}()
	case modeFloor:
		if err := floorDaemon(ctx, dc, cfg); err != nil {
			return err
		}
		x.started.Store(true)
	case ModePeerLegacy:
		go func() {
			if peerDaemon(ctx, dc, cfg, x, legacyStore{c: dc, cd: w.cd}) == nil {
				joined.Add(1) // its entry is written Ready
			}
		}()
	case ModePeerCliques:
		go func() {
			if peerDaemon(ctx, dc, cfg, x, cliqueStore{c: dc, ns: w.driverNS, name: cfg.CliqueObjectName(), cliqueID: cfg.CliqueID}) == nil {
				joined.Add(1)
			}
		}()
	}
	// The kubelet's readiness probe, every 100ms from now.
	if err := x.probe(ctx, time.Now(), probePeriod); err != nil {
		return err
	}
	tr.mark(phaseReady)
	if err := setPodStatus(ctx, kc, pod, ip, true); err != nil {
		return err
	}
	tr.mark(phaseJoined)
	return nil
}

// probePeriod is the simulated kubelet's readiness-probe period.
const probePeriod = 100 * time.Millisecond

// setPodStatus patches the pod's status as the kubelet does (a patch, no resourceVersion: the
// kubelet owns these fields).
func setPodStatus(ctx context.Context, c client.Client, pod *corev1.Pod, ip string, ready bool) error {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	patch := fmt.Appendf(nil, `{"status":{"phase":"Running","podIP":%q,"podIPs":[{"ip":%q}],"conditions":[{"type":"Ready","status":%q,"lastTransitionTime":%q}]}}`,
		ip, ip, status, metav1.Now().UTC().Format(time.RFC3339))
	// Like the kubelet, retry what the apiserver could not take (lost connections, 429, 5xx).
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Steps: 12, Cap: 10 * time.Second},
		func(ctx context.Context) (bool, error) {
			last = c.Status().Patch(ctx, pod, client.RawPatch(types.StrategicMergePatchType, patch))
			if last != nil && (apierrors.IsNotFound(last) || apierrors.IsForbidden(last) || apierrors.IsInvalid(last)) {
				return false, last
			}
			return last == nil, nil
		})
	if err != nil {
		return fmt.Errorf("updating pod status: %w", withLast(err, last))
	}
	return nil
}

// withLast is err, the reason a retry loop gave up, with the last error its attempts returned
// when there is one and it is not err itself (a permanent error ends the loop as it is).
func withLast(err, last error) error {
	if last == nil || errors.Is(err, last) {
		return err
	}
	return fmt.Errorf("%w (last error: %w)", err, last)
}

// floorDaemon opens the one watch a daemon needs (its clique, by name) and makes its one write
// (the pod label), both at once as cdplane's daemon does: no protocol makes fewer requests or
// waits on fewer round trips. It returns once both are done. Like an informer, it retries a
// watch that could not be opened, with backoff, and opens it again when it ends: with tens of
// thousands of instances in one process, a watch may fail to open, and a stand-in that gave up
// would fail the floor where a daemon would have carried on.
func floorDaemon(ctx context.Context, c client.WithWatch, cfg daemon.Config) error {
	open := func() (watch.Interface, error) {
		return openWatch(ctx, c, &cdv1beta1.ComputeDomainCliqueList{},
			client.InNamespace(cfg.PodNamespace), client.MatchingFields{"metadata.name": cfg.CliqueObjectName()})
	}
	labelled := make(chan error, 1)
	go func() { labelled <- daemon.LabelPod(ctx, c, cfg) }()
	wi, err := open()
	if err != nil {
		return err
	}
	go func() {
		for {
			drain(ctx, wi)
			if ctx.Err() != nil {
				return
			}
			next, err := open()
			if err != nil {
				return
			}
			wi = next
		}
	}()
	return <-labelled
}

// watchBackoff is client-go's reflector backoff: 800 ms doubling to 30 s, with jitter.
var watchBackoff = wait.Backoff{Duration: 800 * time.Millisecond, Factor: 2, Jitter: 1, Steps: 1 << 30, Cap: 30 * time.Second}

// openWatch opens a watch, retrying failures with the reflector's backoff until ctx ends.
func openWatch(ctx context.Context, c client.WithWatch, l client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	var wi watch.Interface
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, watchBackoff, func(ctx context.Context) (bool, error) {
		wi, last = c.Watch(ctx, l.DeepCopyObject().(client.ObjectList), opts...)
		return last == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("opening a watch: %w", withLast(err, last))
	}
	return wi, nil
}

// drain reads wi until it ends or ctx does, then stops it.
func drain(ctx context.Context, wi watch.Interface) {
	defer wi.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-wi.ResultChan():
			if !ok {
				return
			}
		}
	}
}

// instantIMEX stands in for IMEX in the benchmark, which measures the registration protocol:
// it is ready as soon as it was started.
type instantIMEX struct {
	started atomic.Bool
	exited  chan error
	// changed is closed, and replaced, whenever started changes: the probe sleeps on it
	// rather than waking every period, which in thousands of instances was a second and a
	// half of this process's CPU per run (time it took from the apiserver beside it).
	mu      sync.Mutex
	changed chan struct{}
}

func (x *instantIMEX) set(started bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.started.Store(started)
	if x.changed != nil {
		close(x.changed)
		x.changed = nil
	}
}

// watch returns a channel closed at the next change of started.
func (x *instantIMEX) watch() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.changed == nil {
		x.changed = make(chan struct{})
	}
	return x.changed
}

func (x *instantIMEX) Start(context.Context) (<-chan error, error) {
	x.exited = make(chan error, 1)
	x.set(true)
	return x.exited, nil
}
func (x *instantIMEX) Reload() error { return nil }
func (x *instantIMEX) Stop(context.Context) error {
	if x.exited != nil {
		x.exited <- nil
	}
	x.set(false)
	return nil
}
func (x *instantIMEX) Ready(context.Context) error {
	if !x.started.Load() {
		return imex.ErrNotReady
	}
	return nil
}

// probe returns when a readiness probe run every period from t0, as the kubelet runs it,
// would first find x ready: at the first tick at or after x started, if it is still started
// then. It sleeps until x starts and then until that tick, so a waiting instance costs nothing.
func (x *instantIMEX) probe(ctx context.Context, t0 time.Time, period time.Duration) error {
	for {
		changed := x.watch()
		if x.Ready(ctx) == nil {
			wait := time.NewTimer(time.Until(nextTick(t0, time.Now(), period)))
			select {
			case <-ctx.Done():
				wait.Stop()
				return ctx.Err()
			case <-wait.C:
			}
			if x.Ready(ctx) == nil {
				return nil
			}
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// nextTick is the first tick at or after now of a clock ticking every period from t0.
func nextTick(t0, now time.Time, period time.Duration) time.Time {
	since := now.Sub(t0)
	if since <= 0 {
		return t0
	}
	n := (since + period - 1) / period
	return t0.Add(n * period)
}

// daemonDirRoot is where the daemon instances keep their IMEX config files: memory (/dev/shm)
// where the machine has it, since thousands of instances on one machine write and sync them
// where thousands of nodes would each write their own; else the temporary directory.
func daemonDirRoot() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return ""
}
