package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/imex"
)

// Deps are what the daemon talks to.
type Deps struct {
	// Client reaches the apiserver with the daemon's identity.
	Client client.WithWatch
	// IMEX supervises the IMEX daemon of this node.
	IMEX imex.Interface
	// Log receives the daemon's log.
	Log logr.Logger
	// RestartBackoff is the first delay before restarting an IMEX that exited (default 1s,
	// doubling up to 30s).
	RestartBackoff time.Duration
}

// Serve labels the pod with its clique and, on a node with a fabric, supervises IMEX until ctx
// ends, then stops IMEX cleanly. A node without a fabric only labels its pod and idles.
func Serve(ctx context.Context, cfg Config, deps Deps) error {
	log := deps.Log
	if err := LabelPod(ctx, deps.Client, cfg); err != nil {
		return err
	}
	log.Info("Labelled pod with its clique", "pod", cfg.PodNamespace+"/"+cfg.PodName, "cliqueID", cfg.CliqueID)
	if cfg.CliqueID == "" {
		log.Info("No NVLink fabric on this node: nothing to run; idling")
		<-ctx.Done()
		return nil
	}

	notify := make(chan struct{}, 1)
	signal := func() {
		select {
		case notify <- struct{}{}:
		default:
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	view := newMembershipView(wctx, deps.Client, cfg, signal)
	defer view.close()
	s := &supervisor{cfg: cfg, deps: deps, view: view, log: log}
	return s.loop(ctx, notify)
}

// LabelPod sets the clique label on the daemon's own pod: its only write to the API.
func LabelPod(ctx context.Context, c client.Client, cfg Config) error {
	pod := &metav1.PartialObjectMetadata{}
	pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	pod.Namespace, pod.Name = cfg.PodNamespace, cfg.PodName
	patch := client.RawPatch("application/merge-patch+json",
		fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, cdv1beta1.CliqueIDLabel, cfg.CliqueID))
	var lastErr error
	err := wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 10, Cap: 10 * time.Second},
		func(ctx context.Context) (bool, error) {
			lastErr = c.Patch(ctx, pod, patch)
			return lastErr == nil, nil
		})
	if err != nil {
		return fmt.Errorf("labelling pod %s/%s with its clique: %w", cfg.PodNamespace, cfg.PodName, errors.Join(err, lastErr))
	}
	return nil
}

// peerSource is where the supervisor reads its clique's membership from: a membershipView,
// or a fake in tests.
type peerSource interface {
	// update reports whether the view is complete (every watch it runs has synced).
	update() bool
	// peers returns the clique's members with an index, and this node's entry if it has one.
	peers(node string) (peers []imex.Peer, self *imex.Peer)
}

// supervisor runs IMEX as membership says.
type supervisor struct {
	cfg  Config
	deps Deps
	view peerSource
	log  logr.Logger
	// after is time.After and now time.Now unless a test sets them.
	after   func(time.Duration) <-chan time.Time
	now     func() time.Time
	running bool
	exited  <-chan error
	backoff time.Duration
	restart <-chan time.Time
	retry   <-chan time.Time
	// runIndex is this node's index when the current run started: IMEX fixes its own node id
	// at start, so a new index needs a new run, not a reload.
	runIndex int
	// readySeen is true once the current run answered Ready: a reload (SIGUSR1) is not sent
	// before, since IMEX reads it only once its handlers are in place. reloadPending records a
	// reload held back until then.
	readySeen     bool
	reloadPending bool
	// lastReload is when the last reload was sent: IMEX honours SIGUSR1 at most once every 5 s
	// and ignores the others, so reloads are spaced by reloadInterval, the changes meanwhile
	// coalesced into the next one.
	lastReload time.Time
	// skipped is the last set of clique entries left out (see usablePeers), logged when it
	// changes.
	skipped []skippedPeer
}

func (s *supervisor) settings() imex.Settings {
	return imex.Settings{
		DNSNames: s.cfg.DNSNames, MaxNodes: s.cfg.MaxNodes, BindIP: s.cfg.PodIP,
		IMEXConfigPath: s.cfg.IMEXConfigPath(), NodesConfigPath: s.cfg.NodesConfigPath(), HostsPath: s.cfg.HostsPath,
	}
}

func (s *supervisor) timer(d time.Duration) <-chan time.Time {
	if s.after == nil {
		return time.After(d)
	}
	return s.after(d)
}

func (s *supervisor) loop(ctx context.Context, notify <-chan struct{}) error {
	// An absent clique sends no event: look once the watch had time to sync.
	s.retry = s.timer(50 * time.Millisecond)
	for {
		select {
		case <-ctx.Done():
			return s.stop()
		case <-notify:
		case err := <-s.exited:
			s.running, s.exited = false, nil
			s.log.Error(err, "IMEX exited; restarting it", "after", s.nextBackoff())
			s.restart = s.timer(s.backoff)
			continue
		case <-s.restart:
			s.restart = nil
		case <-s.retry:
			s.retry = nil
		}
		if !s.view.update() {
			// A watch has not synced yet; its events may have come before it had: look again.
			s.retry = s.timer(100 * time.Millisecond)
			continue
		}
		if err := s.sync(ctx); err != nil {
			s.log.Error(err, "Applying membership")
		}
	}
}

// sync writes the config for the current membership and starts or reloads IMEX. It waits for
// this node's entry and index; a first start sends no reload.
func (s *supervisor) sync(ctx context.Context) error {
	peers, self := s.view.peers(s.cfg.NodeName)
	if self == nil {
		if !s.running {
			s.log.V(1).Info("Waiting for this node's entry and index")
		}
		return nil
	}
	peers = s.usable(peers)
	changes, err := imex.WriteConfig(s.settings(), peers)
	if err != nil {
		return fmt.Errorf("writing IMEX config: %w", err)
	}
	if !s.running {
		if s.restart != nil {
			return nil // a restart is scheduled
		}
		exited, err := s.deps.IMEX.Start(ctx)
		if err != nil {
			s.restart = s.timer(s.nextBackoff())
			return fmt.Errorf("starting IMEX: %w", err)
		}
		s.running, s.exited, s.runIndex = true, exited, self.Index
		s.readySeen, s.reloadPending = false, false
		s.log.Info("Started IMEX", "index", self.Index, "peers", len(peers))
		return nil
	}
	action := changes.Action()
	if self.Index != s.runIndex {
		s.log.Info("This node's index changed; restarting IMEX, which fixes its node id at start",
			"from", s.runIndex, "to", self.Index)
		action = imex.ActionRestart
	}
	switch action {
	case imex.ActionReload:
		s.reloadPending = true
	case imex.ActionRestart:
		s.log.Info("IMEX configuration changed; restarting IMEX", "peers", len(peers))
		stopCtx, cancel := context.WithTimeout(ctx, restartStopTimeout)
		err := s.deps.IMEX.Stop(stopCtx)
		cancel()
		if err != nil {
			return err
		}
		s.running, s.exited = false, nil
		return s.sync(ctx)
	}
	if !s.readySeen && (s.reloadPending || s.backoff > 0) {
		s.readySeen = s.ready(ctx)
	}
	if s.reloadPending {
		if !s.readySeen {
			s.log.V(1).Info("Membership changed; the reload waits until IMEX is Ready", "peers", len(peers))
			if s.retry == nil {
				s.retry = s.timer(reloadRecheck)
			}
			return nil
		}
		if wait := s.lastReload.Add(reloadInterval).Sub(s.clock()); !s.lastReload.IsZero() && wait > 0 {
			s.log.V(1).Info("Membership changed; the reload waits for IMEX's reload interval", "wait", wait)
			if s.retry == nil {
				s.retry = s.timer(wait)
			}
			return nil
		}
		s.reloadPending, s.lastReload = false, s.clock()
		s.log.Info("Membership changed; reloading IMEX", "peers", len(peers))
		return s.deps.IMEX.Reload()
	}
	if s.readySeen {
		s.backoff = 0 // a run that turned Ready resets the backoff
	}
	return nil
}

// restartStopTimeout bounds the stop of a restart: an IMEX that ignores SIGTERM that long is
// killed.
const restartStopTimeout = 30 * time.Second

// reloadRecheck is how often a held-back reload looks again whether IMEX is Ready.
const reloadRecheck = time.Second

// reloadInterval spaces reloads: IMEX ignores a SIGUSR1 within 5 s of the last one it honoured;
// the extra second covers the two clocks' skew.
const reloadInterval = 6 * time.Second

func (s *supervisor) clock() time.Time {
	if s.now == nil {
		return time.Now()
	}
	return s.now()
}

// ready asks IMEX once whether it is Ready, within a bounded time.
func (s *supervisor) ready(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return s.deps.IMEX.Ready(ctx) == nil
}

// usable leaves out the entries that conflict (usablePeers) and logs them once per change.
func (s *supervisor) usable(peers []imex.Peer) []imex.Peer {
	kept, skipped := usablePeers(s.cfg.DNSNames, s.cfg.MaxNodes, s.cfg.NodeName, peers)
	if !slices.Equal(skipped, s.skipped) {
		s.skipped = skipped
		if len(skipped) > 0 {
			nodes, reasons := make([]string, 0, len(skipped)), make([]string, 0, len(skipped))
			for _, p := range skipped {
				nodes, reasons = append(nodes, p.NodeName), append(reasons, p.NodeName+": "+p.Reason)
			}
			s.log.Info("Leaving clique entries out of the IMEX configuration: they conflict with others; the rest of the clique is kept",
				"nodes", nodes, "reasons", reasons)
		}
	}
	return kept
}

// maxRestartBackoff caps the delay before IMEX is restarted after an exit.
const maxRestartBackoff = 30 * time.Second

// nextBackoff is the delay before the next restart: the first delay, then doubling up to
// maxRestartBackoff.
func (s *supervisor) nextBackoff() time.Duration {
	first := s.deps.RestartBackoff
	if first <= 0 {
		first = time.Second
	}
	if s.backoff == 0 {
		s.backoff = first
	} else {
		s.backoff = min(2*s.backoff, maxRestartBackoff)
	}
	return s.backoff
}

func (s *supervisor) stop() error {
	if !s.running {
		return nil
	}
	// No deadline: IMEX gets the pod's whole grace period to exit cleanly (an unsafe
	// termination makes its next start wait for recovery quorum); the kubelet's kill at the
	// end of it ends IMEX too (it dies with the daemon).
	s.log.Info("Stopping IMEX")
	if err := s.deps.IMEX.Stop(context.Background()); err != nil {
		return fmt.Errorf("stopping IMEX: %w", err)
	}
	return nil
}
