package daemon

import (
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/imex"
)

// The supervisor's decisions are one pure function, step: from the state and what happened (an
// input) to the next state and what to do (effects). The supervisor's loop (daemon.go) turns
// what it observes into inputs and applies the effects; an effect whose outcome matters
// (starting IMEX, stopping it for a restart, asking whether it is Ready) comes back as the
// next input. Everything step decides is in the table of machine_test.go.

// phase is where IMEX is in its life on this node, as the daemon sees it.
type phase int

const (
	// idle: IMEX is not running and nothing is scheduled: it starts as soon as membership
	// allows (this node has an entry with an index and, before a first start with addresses
	// in nodes.cfg, the domain lists all its nodes).
	idle phase = iota
	// running: IMEX runs and has not answered Ready in this run yet; reloads wait, as IMEX
	// reads SIGUSR1 only once its handlers are in place.
	running
	// ready: IMEX runs and answered Ready in this run.
	ready
	// backingOff: IMEX is not running (it exited, or failed to start); a restart is due when
	// the backoff timer fires.
	backingOff
	// blocked: another IMEX holds the node's IMEX session for a reason retrying did not cure;
	// IMEX is not started again by this daemon.
	blocked
)

// runs reports whether IMEX runs in phase p.
func (p phase) runs() bool { return p == running || p == ready }

func (p phase) String() string {
	return [...]string{"idle", "running", "ready", "backingOff", "blocked"}[p]
}

// state is what the supervisor remembers between inputs.
type state struct {
	phase phase
	// started is true once this daemon started IMEX: only the first start waits for the
	// domain's nodes.
	started bool
	// runIndex is this node's index when the current run started: IMEX fixes its node id at
	// start, so a new index needs a new run, not a reload.
	runIndex int
	// backoff is the restart delays' sequence: its next step is the next delay. Zero (no
	// Duration) until IMEX first ends or fails to start, and again once a run turned Ready.
	backoff wait.Backoff
	// inUseSince is when IMEX first failed with NV_ERR_IN_USE since it last ran Ready; zero:
	// it has not.
	inUseSince time.Time
	// reloadPending is a reload held back until IMEX is Ready or its reload interval passed;
	// lastReload is when the last one was sent.
	reloadPending bool
	lastReload    time.Time
	// retryArmed is true while a retry timer runs: a held-back reload arms one, not one each
	// time membership is looked at.
	retryArmed bool
}

// inputKind names what happened.
type inputKind int

const (
	// inMembership: membership was read and IMEX's files written for it (input.m).
	inMembership inputKind = iota
	// inStarted: IMEX started (input.index: this node's index it started with).
	inStarted
	// inStartFailed: IMEX failed to start (input.err).
	inStartFailed
	// inExited: the running IMEX ended (input.err).
	inExited
	// inStopped: IMEX stopped, as asked for a restart.
	inStopped
	// inReadiness: IMEX answered whether it is Ready (input.ready).
	inReadiness
	// inRestartDue: the backoff timer fired.
	inRestartDue
	// inRetryDue: the retry timer fired.
	inRetryDue
)

func (k inputKind) String() string {
	return [...]string{"membership", "started", "startFailed", "exited", "stopped", "readiness", "restartDue", "retryDue"}[k]
}

// membership is what the loop read of membership for an inMembership input.
type membership struct {
	// self is true when this node has an entry with an index (index).
	self  bool
	index int
	// peers is how many peers the files list (for the log).
	peers int
	// change is what the files just written ask of a running IMEX.
	change imex.Action
	// domainIncomplete is true when IMEX takes addresses (not names) and the domain lists
	// fewer nodes than it wants (joined of numNodes): every later join would restart IMEX, so
	// a first start waits.
	domainIncomplete bool
	joined, numNodes int
}

type input struct {
	kind  inputKind
	now   time.Time
	m     membership
	index int
	err   error
	ready bool
}

// effectKind names what the loop does.
type effectKind int

const (
	// doStart starts IMEX; the loop answers inStarted or inStartFailed.
	doStart effectKind = iota
	// doStop stops the running IMEX for a restart (reason: why, for the metric); the loop
	// answers inStopped, then reads membership again.
	doStop
	// doReload sends IMEX SIGUSR1.
	doReload
	// doAskReady asks IMEX whether it is Ready; the loop answers inReadiness.
	doAskReady
	// doRestartAfter arms the backoff timer (after); reason, when set, counts a restart.
	doRestartAfter
	// doRetryAfter arms the retry timer (after).
	doRetryAfter
	// doReportBlocked tells the cluster IMEX cannot run here (reason, message).
	doReportBlocked
	// doLog logs message (verbosity 1 when debug; err makes it an error).
	doLog
)

func (k effectKind) String() string {
	return [...]string{"start", "stop", "reload", "askReady", "restartAfter", "retryAfter", "reportBlocked", "log"}[k]
}

type effect struct {
	kind    effectKind
	after   time.Duration
	reason  string
	message string
	debug   bool
	err     error
	kv      []any
}

// policy is what step needs from the daemon's configuration.
type policy struct {
	// firstBackoff is the first restart delay (doubling up to maxRestartBackoff).
	firstBackoff time.Duration
	// sessionInUseRetry is how long NV_ERR_IN_USE is retried before the node is reported.
	sessionInUseRetry time.Duration
	// hostIMEXService is the host nvidia-imex service the plugin found enabled; NV_ERR_IN_USE
	// is then reported at once.
	hostIMEXService string
}

func logf(message string, kv ...any) effect { return effect{kind: doLog, message: message, kv: kv} }
func debugf(message string, kv ...any) effect {
	return effect{kind: doLog, message: message, debug: true, kv: kv}
}

// step is the supervisor's decision for one input: the next state and the effects to apply, in
// order.
func step(s state, in input, p policy) (state, []effect) {
	switch in.kind {
	case inMembership:
		return onMembership(s, in, p)
	case inStarted:
		if s.phase != idle {
			return s, nil // only an idle supervisor starts IMEX
		}
		s.phase, s.started, s.runIndex, s.reloadPending = running, true, in.index, false
		return s, nil
	case inStartFailed:
		if s.phase != idle {
			return s, nil
		}
		if s, fx, ok := sessionInUse(s, in, p); ok {
			return s, fx
		}
		s, after := s.backOff(p)
		return s, []effect{{kind: doRestartAfter, after: after}}
	case inExited:
		if !s.phase.runs() {
			return s, nil
		}
		if s, fx, ok := sessionInUse(s, in, p); ok {
			return s, fx
		}
		s, after := s.backOff(p)
		return s, []effect{
			{kind: doLog, message: "IMEX exited; restarting it", err: in.err, kv: []any{"after", after}},
			{kind: doRestartAfter, after: after, reason: restartExited},
		}
	case inStopped:
		if s.phase.runs() {
			s.phase = idle
		}
		return s, nil
	case inReadiness:
		if !s.phase.runs() {
			return s, nil
		}
		if in.ready && s.phase == running {
			s.phase = ready
		}
		return settle(s, in.now, in.m.peers)
	case inRestartDue:
		if s.phase == backingOff {
			s.phase = idle
		}
		return s, nil
	case inRetryDue:
		s.retryArmed = false
		return s, nil
	}
	return s, nil
}

// onMembership starts IMEX when it may, and restarts or reloads a running one whose files
// changed.
func onMembership(s state, in input, _ policy) (state, []effect) {
	m := in.m
	if !m.self {
		if !s.phase.runs() {
			return s, []effect{debugf("Waiting for this node's entry and index")}
		}
		return s, nil
	}
	switch s.phase {
	case backingOff, blocked:
		return s, nil // a restart is scheduled, or IMEX cannot run here
	case idle:
		if m.domainIncomplete && !s.started {
			return s, []effect{debugf("Waiting for the domain's nodes before IMEX first starts (addresses in nodes.cfg: each later join restarts it)",
				"joined", m.joined, "numNodes", m.numNodes)}
		}
		return s, []effect{{kind: doStart}}
	}
	// running or ready
	action, reason := m.change, restartConfigChanged
	var fx []effect
	if m.index != s.runIndex {
		fx = append(fx, logf("This node's index changed; restarting IMEX, which fixes its node id at start", "from", s.runIndex, "to", m.index))
		action, reason = imex.ActionRestart, restartIndexChanged
	}
	switch action {
	case imex.ActionRestart:
		return s, append(fx, logf("IMEX configuration changed; restarting IMEX", "peers", m.peers), effect{kind: doStop, reason: reason})
	case imex.ActionReload:
		s.reloadPending = true
	}
	if s.phase == running && (s.reloadPending || s.backedOff()) {
		return s, append(fx, effect{kind: doAskReady})
	}
	s, more := settle(s, in.now, m.peers)
	return s, append(fx, more...)
}

// settle sends a pending reload once IMEX is Ready and its reload interval has passed, and
// clears the backoff of a run that turned Ready.
func settle(s state, now time.Time, peers int) (state, []effect) {
	if s.reloadPending {
		if s.phase != ready {
			if s.retryArmed {
				return s, []effect{debugf("Membership changed; the reload waits until IMEX is Ready", "peers", peers)}
			}
			s.retryArmed = true
			return s, []effect{debugf("Membership changed; the reload waits until IMEX is Ready", "peers", peers), {kind: doRetryAfter, after: reloadRecheck}}
		}
		if wait := s.lastReload.Add(reloadInterval).Sub(now); !s.lastReload.IsZero() && wait > 0 {
			fx := []effect{debugf("Membership changed; the reload waits for IMEX's reload interval", "wait", wait)}
			if !s.retryArmed {
				s.retryArmed = true
				fx = append(fx, effect{kind: doRetryAfter, after: wait})
			}
			return s, fx
		}
		s.reloadPending, s.lastReload = false, now
		return s, []effect{logf("Membership changed; reloading IMEX", "peers", peers), {kind: doReload}}
	}
	if s.phase == ready {
		s.backoff = wait.Backoff{}
		s.inUseSince = time.Time{}
	}
	return s, nil
}

// sessionInUse decides what an IMEX that ended (or failed to start) with NV_ERR_IN_USE does:
// another IMEX holds the node's IMEX session, which the kernel gives one IMEX a node. Unless
// the plugin found a host nvidia-imex service enabled on the node (then that is the holder,
// reported at once), that is most often the previous domain's IMEX on the node, still
// releasing its memory exports after its pod was told to stop (jobs run back to back on the
// same nodes): IMEX is started again with the usual backoff, for up to sessionInUseRetry. A
// session still held after that is reported and IMEX stays stopped. ok is false for any other
// error.
func sessionInUse(s state, in input, p policy) (state, []effect, bool) {
	if !imex.IsSessionInUse(in.err) {
		return s, nil, false
	}
	if s.inUseSince.IsZero() {
		s.inUseSince = in.now
	}
	if held := in.now.Sub(s.inUseSince); held < p.sessionInUseRetry && p.hostIMEXService == "" {
		s, after := s.backOff(p)
		return s, []effect{
			logf("The node's IMEX session is still held by another IMEX (a previous domain's, shutting down?); trying again",
				"code", imex.SessionInUseCode, "after", after, "heldFor", held.Round(time.Second), "givingUpAfter", p.sessionInUseRetry),
			{kind: doRestartAfter, after: after},
		}, true
	}
	s.phase = blocked
	msg := sessionHeldMessage(p.hostIMEXService, p.sessionInUseRetry)
	return s, []effect{
		{kind: doLog, message: "IMEX cannot run on this node", err: in.err, kv: []any{"reason", cdv1beta1.IMEXBlockedHostIMEXInUse, "help", msg}},
		{kind: doReportBlocked, reason: cdv1beta1.IMEXBlockedHostIMEXInUse, message: msg},
	}, true
}

// backOff is s waiting out the next restart delay, which it returns: the next step of the
// restart backoff (restartBackoff's first, after a run that turned Ready or none yet).
func (s state) backOff(p policy) (state, time.Duration) {
	s.phase = backingOff
	if !s.backedOff() {
		s.backoff = p.restartBackoff()
	}
	after := s.backoff.Step()
	return s, after
}

// backedOff says whether IMEX ended or failed to start since it last ran Ready.
func (s state) backedOff() bool { return s.backoff.Duration > 0 }

// maxRestartBackoff caps the delay before IMEX is restarted after an exit.
const maxRestartBackoff = 30 * time.Second

// restartBackoff is the sequence of restart delays: firstBackoff, doubling up to
// maxRestartBackoff.
func (p policy) restartBackoff() wait.Backoff {
	return wait.Backoff{Duration: p.firstBackoff, Factor: 2, Cap: maxRestartBackoff, Steps: math.MaxInt32}
}
