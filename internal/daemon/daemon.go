package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/atomicfile"
	"cdplane/internal/imex"
	"cdplane/internal/scheme"
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
	// SessionInUseRetry is how long IMEX is retried while another IMEX holds the node's
	// session (NV_ERR_IN_USE); zero: DefaultSessionInUseRetry; negative: not at all.
	SessionInUseRetry time.Duration
	// Metrics records the daemon's events; nil records none.
	Metrics *Metrics
}

// Serve labels the pod with its clique and, on a node with a fabric, supervises IMEX until ctx
// ends, then stops IMEX cleanly. A node without a fabric only labels its pod and idles.
func Serve(ctx context.Context, cfg Config, deps Deps) error {
	log := deps.Log
	// A new daemon tries IMEX again: what an earlier one found blocking may be gone.
	if err := os.Remove(cfg.BlockedPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("clearing the earlier daemon's IMEX state: %w", err)
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
	var view *membershipView
	if cfg.CliqueID != "" {
		// The watch of the clique opens while the pod is labelled: the daemon needs both and
		// neither waits for the other, and on a loaded apiserver each takes seconds (one after
		// the other, they added up for every daemon of a burst).
		view = newMembershipView(wctx, deps.Client, cfg, signal, deps.Log)
		defer view.close()
	}
	if err := LabelPod(ctx, deps.Client, cfg); err != nil {
		return err
	}
	log.Info("Labelled pod with its clique", "pod", cfg.PodNamespace+"/"+cfg.PodName, "cliqueID", cfg.CliqueID)
	if view != nil {
		view.registered()
	}
	if cfg.CliqueID == "" && cfg.FabricError != "" {
		// The node has a fabric whose registration failed: it serves as one without, which
		// the domain's NodesBlocked condition says (CrashOnNVLinkFabricErrors off).
		msg := "the node's NVLink fabric registration failed, so it serves as a node without NVLink fabric (no IMEX): " + cfg.FabricError
		log.Info("NVLink fabric registration failed: serving as a node without fabric", "fabricError", cfg.FabricError)
		deps.Metrics.blocked(cdv1beta1.IMEXBlockedFabricError)
		reportBlocked(ctx, deps.Client, cfg, cdv1beta1.IMEXBlockedFabricError, msg, log)
	}
	if cfg.CliqueID == "" {
		log.Info("No NVLink fabric on this node: nothing to run; idling")
		<-ctx.Done()
		return nil
	}

	s := &supervisor{cfg: cfg, deps: deps, view: view, log: log}
	s.report = func(ctx context.Context, reason, message string) {
		reportBlocked(ctx, deps.Client, cfg, reason, message, log)
	}
	return s.loop(ctx, notify)
}

// LabelPod sets the clique label on the daemon's own pod, and removes the IMEX-blocked label an
// earlier daemon in the pod may have set: its one write to the API in a healthy run.
func LabelPod(ctx context.Context, c client.Client, cfg Config) error {
	return patchPodLabels(ctx, c, cfg, fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q,%q:null}}}`,
		cdv1beta1.CliqueIDLabel, cfg.CliqueID, cdv1beta1.IMEXBlockedLabel))
}

// patchPodLabels merge-patches the daemon's own pod, retrying with backoff.
func patchPodLabels(ctx context.Context, c client.Client, cfg Config, body []byte) error {
	pod := scheme.Meta(corev1.SchemeGroupVersion.WithKind("Pod"))
	pod.Namespace, pod.Name = cfg.PodNamespace, cfg.PodName
	patch := client.RawPatch("application/merge-patch+json", body)
	var lastErr error
	err := wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 10, Cap: 10 * time.Second},
		func(ctx context.Context) (bool, error) {
			lastErr = c.Patch(ctx, pod, patch)
			return lastErr == nil, nil
		})
	if err != nil {
		return fmt.Errorf("labelling pod %s/%s: %w", cfg.PodNamespace, cfg.PodName, errors.Join(err, lastErr))
	}
	return nil
}

// reportBlocked tells the cluster that IMEX cannot run on this node: it records the message for
// the readiness check (whose failure the kubelet shows on the pod), labels the pod with the
// reason (the controller's NodesBlocked condition on the domain reads it), and posts a Warning
// event regarding the pod with the node as related object. Failures are logged: the daemon
// keeps running either way.
func reportBlocked(ctx context.Context, c client.Client, cfg Config, reason, message string, log logr.Logger) {
	if err := atomicfile.Write(cfg.BlockedPath(), []byte(reason+": "+message+"\n"), 0o644); err != nil {
		log.Error(err, "Recording the IMEX state for the readiness check")
	}
	if err := patchPodLabels(ctx, c, cfg, fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, cdv1beta1.IMEXBlockedLabel, reason)); err != nil {
		log.Error(err, "Labelling the pod as blocked")
	}
	now := metav1.NowMicro()
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: cfg.PodNamespace, Name: fmt.Sprintf("%s.%x", cfg.PodName, now.UnixNano())},
		EventTime:  now, Type: corev1.EventTypeWarning, Reason: reason, Action: "StartIMEX", Note: truncateNote(message),
		ReportingController: "resource.nvidia.com/cdplane-daemon", ReportingInstance: "cdplane-daemon-" + cfg.NodeName,
		Regarding: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: cfg.PodNamespace, Name: cfg.PodName, UID: types.UID(cfg.PodUID)},
		Related:   &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: cfg.NodeName},
	}
	if err := c.Create(ctx, ev); err != nil {
		log.Error(err, "Posting the event", "reason", reason)
	}
}

// truncateNote keeps an event's note within the API's 1 kB limit.
func truncateNote(s string) string {
	const limit = 1024
	if len(s) <= limit {
		return s
	}
	return s[:limit-3] + "..."
}

// peerSource is where the supervisor reads its clique's membership from: a membershipView,
// or a fake in tests.
type peerSource interface {
	// update reports whether the view is complete (every watch it runs has synced).
	update() bool
	// peers returns the clique's members with an index, and this node's entry if it has one.
	peers(node string) (peers []imex.Peer, self *imex.Peer)
	// domainSize reports how many nodes the domain lists and wants (numNodes); ok is false
	// when that is not known (the clique holds the membership).
	domainSize() (joined, numNodes int, ok bool)
	// ready reports whether this node's entry is Ready (the controller's copy of its daemon
	// pod's readiness).
	ready(node string) bool
}

// supervisor runs IMEX as membership says: a thin loop that turns what it observes (membership,
// IMEX's exit, its timers) into inputs for step (machine.go) and applies the effects step
// returns.
type supervisor struct {
	cfg  Config
	deps Deps
	view peerSource
	log  logr.Logger
	// after is time.After and now time.Now unless a test sets them.
	after func(time.Duration) <-chan time.Time
	now   func() time.Time
	// report tells the cluster that IMEX is blocked (see reportBlocked); nil: nothing reports.
	report func(ctx context.Context, reason, message string)

	state state
	// exited is the running IMEX's end; restart and retry are the armed timers (nil: none).
	exited  <-chan error
	restart <-chan time.Time
	retry   <-chan time.Time
	// config writes IMEX's files, skipping the work when nothing they hold changed.
	config imex.ConfigWriter
	// skipped is the last set of clique entries left out (see usablePeers), logged when it
	// changes.
	skipped []skippedPeer
}

func (s *supervisor) policy() policy {
	p := policy{firstBackoff: s.deps.RestartBackoff, sessionInUseRetry: s.deps.SessionInUseRetry, hostIMEXService: s.cfg.HostIMEXService}
	if p.firstBackoff <= 0 {
		p.firstBackoff = time.Second
	}
	if p.sessionInUseRetry == 0 {
		p.sessionInUseRetry = DefaultSessionInUseRetry
	}
	return p
}

func (s *supervisor) settings() imex.Settings {
	return imex.Settings{
		DNSNames: s.cfg.DNSNames, DomainUID: s.cfg.CDUID, MaxNodes: s.cfg.MaxNodes, BindIP: s.cfg.PodIP,
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
	s.retry, s.state.retryArmed = s.timer(50*time.Millisecond), true
	for {
		select {
		case <-ctx.Done():
			return s.stop()
		case <-notify:
		case err := <-s.exited:
			s.exited = nil
			s.deps.Metrics.imexExited(err)
			// Its effects (a log, a timer, a report) cannot fail.
			_ = s.handle(ctx, input{kind: inExited, err: err})
			continue
		case <-s.restart:
			s.restart = nil
			_ = s.handle(ctx, input{kind: inRestartDue}) // no effects
		case <-s.retry:
			s.retry = nil
			_ = s.handle(ctx, input{kind: inRetryDue}) // no effects
		}
		if !s.view.update() {
			// A watch has not synced yet; its events may have come before it had: look again.
			s.retry, s.state.retryArmed = s.timer(100*time.Millisecond), true
			continue
		}
		if err := s.sync(ctx); err != nil {
			s.deps.Metrics.syncFailed()
			s.log.Error(err, "Applying membership")
		}
	}
}

// sync reads membership, writes IMEX's files for it and hands step what it found.
func (s *supervisor) sync(ctx context.Context) error {
	peers, self := s.view.peers(s.cfg.NodeName)
	s.deps.Metrics.membership(self, s.view.ready(s.cfg.NodeName), s.clock())
	m := membership{}
	if self != nil {
		peers = s.usable(peers)
		changes, err := s.config.Write(s.settings(), peers)
		s.deps.Metrics.configWritten(changes) // what was written before a failure too
		if err != nil {
			return fmt.Errorf("writing IMEX config: %w", err)
		}
		s.deps.Metrics.configured(len(peers), len(s.skipped))
		m = membership{self: true, index: self.Index, peers: len(peers), change: changes.Action()}
		if !s.cfg.DNSNames {
			// With addresses in nodes.cfg every node that joins later changes nodes.cfg and
			// restarts IMEX, so a first start waits until the domain lists numNodes nodes, as
			// NVIDIA's daemon does in that mode. Names need no wait: a join is a hosts reload.
			if joined, numNodes, ok := s.view.domainSize(); ok && joined < numNodes {
				m.domainIncomplete, m.joined, m.numNodes = true, joined, numNodes
			}
		}
	}
	return s.handle(ctx, input{kind: inMembership, m: m})
}

// handle runs step for in and applies its effects in order; the outcome of an effect that
// has one is handled as the next input. It returns the first error an effect met.
func (s *supervisor) handle(ctx context.Context, in input) error {
	in.now = s.clock()
	next, effects := step(s.state, in, s.policy())
	if next.phase != s.state.phase {
		s.log.V(2).Info("IMEX supervisor", "input", in.kind.String(), "from", s.state.phase.String(), "to", next.phase.String())
	}
	s.state = next
	for _, e := range effects {
		switch e.kind {
		case doLog:
			switch {
			case e.err != nil:
				s.log.Error(e.err, e.message, e.kv...)
			case e.debug:
				s.log.V(1).Info(e.message, e.kv...)
			default:
				s.log.Info(e.message, e.kv...)
			}
		case doStart:
			exited, err := s.deps.IMEX.Start(ctx)
			s.deps.Metrics.imexStarted(err)
			if err != nil {
				_ = s.handle(ctx, input{kind: inStartFailed, err: err}) // arms a timer or reports; no effect fails
				if imex.IsSessionInUse(err) {
					return nil // retried or reported as such, not a failure to apply membership
				}
				return fmt.Errorf("starting IMEX: %w", err)
			}
			s.exited = exited
			s.log.Info("Started IMEX", "index", in.m.index, "peers", in.m.peers)
			return s.handle(ctx, input{kind: inStarted, index: in.m.index})
		case doStop:
			s.deps.Metrics.imexRestart(e.reason)
			stopCtx, cancel := context.WithTimeout(ctx, restartStopTimeout)
			err := s.deps.IMEX.Stop(stopCtx)
			cancel()
			if err != nil {
				return err
			}
			s.exited = nil
			_ = s.handle(ctx, input{kind: inStopped}) // no effects
			// Membership is read again, as after any change: the files may have moved on.
			return s.sync(ctx)
		case doReload:
			if err := s.deps.IMEX.Reload(); err != nil {
				return err
			}
			s.deps.Metrics.reloaded()
		case doAskReady:
			return s.handle(ctx, input{kind: inReadiness, m: in.m, ready: s.ready(ctx)})
		case doRestartAfter:
			if e.reason != "" {
				s.deps.Metrics.imexRestart(e.reason)
			}
			s.restart = s.timer(e.after)
		case doRetryAfter:
			s.retry = s.timer(e.after)
		case doReportBlocked:
			s.restart = nil
			s.deps.Metrics.blocked(e.reason)
			if s.report != nil {
				s.report(ctx, e.reason, e.message)
			}
		}
	}
	return nil
}

// DefaultSessionInUseRetry is how long IMEX is retried while another IMEX holds the node's
// session: a stopping daemon pod's IMEX gets the pod's 30 s grace period to release its
// exports; two minutes cover that and a slow node.
const DefaultSessionInUseRetry = 2 * time.Minute

// sessionHeldMessage says what holds the session and what to do.
func sessionHeldMessage(hostService string, window time.Duration) string {
	if hostService != "" {
		return "a host nvidia-imex service is enabled on this node (" + hostService + ") and holds its IMEX session (" +
			imex.SessionInUseCode + "); the kernel allows one per node. IMEX is not restarted: stop and disable the host " +
			"service (systemctl disable --now nvidia-imex) and delete this pod, or run the plane with imex.mode=hostManaged"
	}
	return "the node's IMEX session is still held by another IMEX (" + imex.SessionInUseCode + ") after " + window.String() +
		" of retries; no host nvidia-imex service was found enabled. IMEX is not restarted: find the nvidia-imex process " +
		"on the node (a previous domain's that does not exit, or a service started by hand), stop it, and delete this pod"
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
	err := s.deps.IMEX.Ready(ctx)
	s.deps.Metrics.readinessChecked(err, s.clock())
	return err == nil
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

func (s *supervisor) stop() error {
	if !s.state.phase.runs() {
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
