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
		// neither waits for the other, and on a loaded apiserver each takes seconds (at 2,304
		// daemons in a burst, about 5 s at the median between the label and the open watch
		// when they went one after the other).
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
	pod := &metav1.PartialObjectMetadata{}
	pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
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
	// config writes IMEX's files, skipping the work when nothing they hold changed.
	config imex.ConfigWriter
	// skipped is the last set of clique entries left out (see usablePeers), logged when it
	// changes.
	skipped []skippedPeer
	// blocked is why IMEX cannot run on this node, for a reason retrying did not cure
	// (cdv1beta1.IMEXBlockedHostIMEXInUse); once set, IMEX is not started again by this
	// process.
	blocked string
	// inUseSince is when IMEX first failed with NV_ERR_IN_USE since it last ran Ready; zero:
	// it has not.
	inUseSince time.Time
	// report tells the cluster that IMEX is blocked (see reportBlocked); nil: nothing reports.
	report func(ctx context.Context, reason, message string)
	// started is true once IMEX was started by this daemon.
	started bool
}

// waitForDomain says whether the first start of IMEX waits for the domain's nodes: with
// addresses in nodes.cfg (IMEXDaemonsWithDNSNames off) every node that joins later changes
// nodes.cfg and restarts IMEX, so the daemon first waits until the domain lists numNodes nodes,
// as NVIDIA's daemon does in that mode. Names need no wait: a join is a hosts-file reload.
func (s *supervisor) waitForDomain() (wait bool, joined, numNodes int) {
	if s.cfg.DNSNames || s.started {
		return false, 0, 0
	}
	joined, numNodes, ok := s.view.domainSize()
	if !ok {
		return false, 0, 0
	}
	return joined < numNodes, joined, numNodes
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
	s.retry = s.timer(50 * time.Millisecond)
	for {
		select {
		case <-ctx.Done():
			return s.stop()
		case <-notify:
		case err := <-s.exited:
			s.running, s.exited = false, nil
			s.deps.Metrics.imexExited(err)
			if s.block(ctx, err) {
				continue
			}
			s.deps.Metrics.imexRestart(restartExited)
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
			s.deps.Metrics.syncFailed()
			s.log.Error(err, "Applying membership")
		}
	}
}

// sync writes the config for the current membership and starts or reloads IMEX. It waits for
// this node's entry and index; a first start sends no reload.
func (s *supervisor) sync(ctx context.Context) error {
	peers, self := s.view.peers(s.cfg.NodeName)
	s.deps.Metrics.membership(self, s.view.ready(s.cfg.NodeName), s.clock())
	if self == nil {
		if !s.running {
			s.log.V(1).Info("Waiting for this node's entry and index")
		}
		return nil
	}
	peers = s.usable(peers)
	changes, err := s.config.Write(s.settings(), peers)
	s.deps.Metrics.configWritten(changes) // what was written before a failure too
	if err != nil {
		return fmt.Errorf("writing IMEX config: %w", err)
	}
	s.deps.Metrics.configured(len(peers), len(s.skipped))
	if !s.running {
		if s.restart != nil || s.blocked != "" {
			return nil // a restart is scheduled, or IMEX cannot run here
		}
		if wait, joined, want := s.waitForDomain(); wait {
			s.log.V(1).Info("Waiting for the domain's nodes before IMEX first starts (addresses in nodes.cfg: each later join restarts it)",
				"joined", joined, "numNodes", want)
			return nil
		}
		exited, err := s.deps.IMEX.Start(ctx)
		s.deps.Metrics.imexStarted(err)
		if err != nil {
			if s.block(ctx, err) {
				return nil
			}
			s.restart = s.timer(s.nextBackoff())
			return fmt.Errorf("starting IMEX: %w", err)
		}
		s.running, s.exited, s.runIndex, s.started = true, exited, self.Index, true
		s.readySeen, s.reloadPending = false, false
		s.log.Info("Started IMEX", "index", self.Index, "peers", len(peers))
		return nil
	}
	action, reason := changes.Action(), restartConfigChanged
	if self.Index != s.runIndex {
		s.log.Info("This node's index changed; restarting IMEX, which fixes its node id at start",
			"from", s.runIndex, "to", self.Index)
		action, reason = imex.ActionRestart, restartIndexChanged
	}
	switch action {
	case imex.ActionReload:
		s.reloadPending = true
	case imex.ActionRestart:
		s.deps.Metrics.imexRestart(reason)
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
		if err := s.deps.IMEX.Reload(); err != nil {
			return err
		}
		s.deps.Metrics.reloaded()
		return nil
	}
	if s.readySeen {
		s.backoff = 0 // a run that turned Ready resets the backoff
		s.inUseSince = time.Time{}
	}
	return nil
}

// block decides what an IMEX that ended (or failed to start) with NV_ERR_IN_USE does: another
// IMEX holds the node's IMEX session, which the kernel gives one IMEX a node. Unless the plugin
// found a host nvidia-imex service enabled on the node (then that is the holder, and it is
// reported at once), that is most often the previous domain's IMEX on the node, still
// releasing its memory exports after its pod was told to stop (jobs run back to back on the
// same nodes): IMEX is then started again with the usual backoff, for up to SessionInUseRetry.
// A session still held after that is reported and IMEX stays stopped. It returns false for any
// other error, which the caller retries as always.
func (s *supervisor) block(ctx context.Context, err error) bool {
	if !imex.IsSessionInUse(err) {
		return false
	}
	now := s.clock()
	if s.inUseSince.IsZero() {
		s.inUseSince = now
	}
	window := s.deps.SessionInUseRetry
	if window == 0 {
		window = DefaultSessionInUseRetry
	}
	if held := now.Sub(s.inUseSince); held < window && s.cfg.HostIMEXService == "" {
		s.restart = s.timer(s.nextBackoff())
		s.log.Info("The node's IMEX session is still held by another IMEX (a previous domain's, shutting down?); trying again",
			"code", imex.SessionInUseCode, "after", s.backoff, "heldFor", held.Round(time.Second), "givingUpAfter", window)
		return true
	}
	s.blocked = cdv1beta1.IMEXBlockedHostIMEXInUse
	s.restart = nil
	s.deps.Metrics.blocked(s.blocked)
	msg := sessionHeldMessage(s.cfg.HostIMEXService, window)
	s.log.Error(err, "IMEX cannot run on this node", "reason", s.blocked, "help", msg)
	if s.report != nil {
		s.report(ctx, s.blocked, msg)
	}
	return true
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
