package daemon

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/wait"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/imex"
)

// The supervisor's transition table: every phase with every input, and the variants each
// decision depends on. A row names the state before, the input, the state after and the
// effects in order (a log as log, debug or error; a timer with its delay; a stop or a restart
// timer with the reason its metric counts).
func TestStepTable(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	pol := policy{firstBackoff: time.Second, sessionInUseRetry: 2 * time.Minute}
	withHost := pol
	withHost.hostIMEXService = "/etc/systemd/system/multi-user.target.wants/nvidia-imex.service"
	inUse := fmt.Errorf("starting: nvidia-imex: exit status 1: IMEX session: %s", imex.SessionInUseCode)
	crashed := errors.New("nvidia-imex: exit status 1")

	// after is the restart backoff once n delays were taken (1s, 2s, 4s, ...; next: the n+1th).
	after := func(n int) wait.Backoff {
		b := pol.restartBackoff()
		for range n {
			b.Step()
		}
		return b
	}
	at := func(p phase) state { return state{phase: p, started: true, runIndex: 3} }
	with := func(s state, f func(*state)) state { f(&s); return s }
	member := func(change imex.Action) input {
		return input{kind: inMembership, m: membership{self: true, index: 3, peers: 2, change: change}}
	}
	other := func(k inputKind) input { return input{kind: k} }

	type row struct {
		name   string
		from   state
		in     input
		pol    *policy
		want   state
		effect []string
	}
	rows := []row{
		// membership
		{name: "idle, no entry for this node: wait", from: at(idle), in: input{kind: inMembership}, want: at(idle), effect: []string{"debug"}},
		{name: "idle: start", from: at(idle), in: member(imex.ActionNone), want: at(idle), effect: []string{"start"}},
		{name: "idle, first start, domain incomplete: wait", from: state{}, in: input{kind: inMembership, m: membership{self: true, domainIncomplete: true}}, want: state{}, effect: []string{"debug"}},
		{name: "idle, started before, domain incomplete: start", from: at(idle), in: input{kind: inMembership, m: membership{self: true, domainIncomplete: true}}, want: at(idle), effect: []string{"start"}},
		{name: "running, no entry: carry on", from: at(running), in: input{kind: inMembership}, want: at(running)},
		{name: "ready, no entry: carry on", from: at(ready), in: input{kind: inMembership}, want: at(ready)},
		{name: "backingOff, no entry: wait", from: at(backingOff), in: input{kind: inMembership}, want: at(backingOff), effect: []string{"debug"}},
		{name: "backingOff: the timer restarts it", from: at(backingOff), in: member(imex.ActionRestart), want: at(backingOff)},
		{name: "blocked: never started again", from: at(blocked), in: member(imex.ActionNone), want: at(blocked)},
		{name: "blocked, no entry", from: at(blocked), in: input{kind: inMembership}, want: at(blocked), effect: []string{"debug"}},
		{name: "running, nothing changed", from: at(running), in: member(imex.ActionNone), want: at(running)},
		{name: "running after a backoff: ask whether Ready", from: with(at(running), func(s *state) { s.backoff = after(2) }), in: member(imex.ActionNone),
			want: with(at(running), func(s *state) { s.backoff = after(2) }), effect: []string{"askReady"}},
		{name: "running, hosts changed: reload pending, ask whether Ready", from: at(running), in: member(imex.ActionReload),
			want: with(at(running), func(s *state) { s.reloadPending = true }), effect: []string{"askReady"}},
		{name: "ready, hosts changed: reload", from: at(ready), in: member(imex.ActionReload),
			want: with(at(ready), func(s *state) { s.lastReload = t0 }), effect: []string{"log", "reload"}},
		{name: "ready, hosts changed 2 s after a reload: wait out the interval", from: with(at(ready), func(s *state) { s.lastReload = t0.Add(-2 * time.Second) }), in: member(imex.ActionReload),
			want: with(at(ready), func(s *state) { s.lastReload, s.reloadPending, s.retryArmed = t0.Add(-2*time.Second), true, true }), effect: []string{"debug", "retryAfter 4s"}},
		{name: "ready, reload waiting, retry armed: no second timer", from: with(at(ready), func(s *state) { s.lastReload, s.retryArmed = t0.Add(-2*time.Second), true }), in: member(imex.ActionReload),
			want: with(at(ready), func(s *state) { s.lastReload, s.reloadPending, s.retryArmed = t0.Add(-2*time.Second), true, true }), effect: []string{"debug"}},
		{name: "ready, reload waiting, interval passed: reload", from: with(at(ready), func(s *state) { s.lastReload, s.reloadPending = t0.Add(-7*time.Second), true }), in: member(imex.ActionNone),
			want: with(at(ready), func(s *state) { s.lastReload = t0 }), effect: []string{"log", "reload"}},
		{name: "running, files need a restart", from: at(running), in: member(imex.ActionRestart), want: at(running), effect: []string{"log", "stop config_changed"}},
		{name: "ready, files need a restart", from: at(ready), in: member(imex.ActionRestart), want: at(ready), effect: []string{"log", "stop config_changed"}},
		{name: "ready, this node's index changed: restart", from: at(ready), in: input{kind: inMembership, m: membership{self: true, index: 4}}, want: at(ready), effect: []string{"log", "log", "stop index_changed"}},
		{name: "ready: the backoff and the session wait cleared", from: with(at(ready), func(s *state) { s.backoff, s.inUseSince = after(3), t0.Add(-time.Minute) }), in: member(imex.ActionNone), want: at(ready)},

		// started, start failed
		{name: "idle, started", from: state{}, in: input{kind: inStarted, index: 5}, want: state{phase: running, started: true, runIndex: 5}},
		{name: "idle, started: a reload pending from the last run is dropped", from: with(at(idle), func(s *state) { s.reloadPending = true }), in: input{kind: inStarted, index: 3}, want: at(running)},
		{name: "running, started (not possible): unchanged", from: at(running), in: input{kind: inStarted, index: 5}, want: at(running)},
		{name: "ready, started (not possible): unchanged", from: at(ready), in: input{kind: inStarted, index: 5}, want: at(ready)},
		{name: "backingOff, started (not possible): unchanged", from: at(backingOff), in: input{kind: inStarted}, want: at(backingOff)},
		{name: "blocked, started (not possible): unchanged", from: at(blocked), in: input{kind: inStarted}, want: at(blocked)},
		{name: "idle, start failed: back off 1 s", from: at(idle), in: input{kind: inStartFailed, err: crashed},
			want: with(at(backingOff), func(s *state) { s.backoff = after(1) }), effect: []string{"restartAfter 1s"}},
		{name: "idle, start failed again: the backoff doubles", from: with(at(idle), func(s *state) { s.backoff = after(3) }), in: input{kind: inStartFailed, err: crashed},
			want: with(at(backingOff), func(s *state) { s.backoff = after(4) }), effect: []string{"restartAfter 8s"}},
		{name: "idle, start failed: the backoff stops at 30 s", from: with(at(idle), func(s *state) { s.backoff = after(5) }), in: input{kind: inStartFailed, err: crashed},
			want: with(at(backingOff), func(s *state) { s.backoff = after(6) }), effect: []string{"restartAfter 30s"}},
		{name: "idle, start failed at the cap: 30 s again", from: with(at(idle), func(s *state) { s.backoff = after(6) }), in: input{kind: inStartFailed, err: crashed},
			want: with(at(backingOff), func(s *state) { s.backoff = after(7) }), effect: []string{"restartAfter 30s"}},
		{name: "idle, session in use: retried", from: at(idle), in: input{kind: inStartFailed, err: inUse},
			want: with(at(backingOff), func(s *state) { s.backoff, s.inUseSince = after(1), t0 }), effect: []string{"log", "restartAfter 1s"}},
		{name: "idle, session in use for 2 minutes: reported, blocked", from: with(at(idle), func(s *state) { s.inUseSince = t0.Add(-2 * time.Minute) }), in: input{kind: inStartFailed, err: inUse},
			want: with(at(blocked), func(s *state) { s.inUseSince = t0.Add(-2 * time.Minute) }), effect: []string{"error", "reportBlocked " + cdv1beta1.IMEXBlockedHostIMEXInUse}},
		{name: "idle, session in use with a host service: reported at once", from: at(idle), in: input{kind: inStartFailed, err: inUse}, pol: &withHost,
			want: with(at(blocked), func(s *state) { s.inUseSince = t0 }), effect: []string{"error", "reportBlocked " + cdv1beta1.IMEXBlockedHostIMEXInUse}},
		{name: "running, start failed (not possible): unchanged", from: at(running), in: input{kind: inStartFailed, err: crashed}, want: at(running)},
		{name: "ready, start failed (not possible): unchanged", from: at(ready), in: input{kind: inStartFailed, err: crashed}, want: at(ready)},
		{name: "backingOff, start failed (not possible): unchanged", from: at(backingOff), in: input{kind: inStartFailed, err: crashed}, want: at(backingOff)},
		{name: "blocked, start failed (not possible): unchanged", from: at(blocked), in: input{kind: inStartFailed, err: inUse}, want: at(blocked)},

		// exited
		{name: "running, exited: restart after 1 s", from: at(running), in: input{kind: inExited, err: crashed},
			want: with(at(backingOff), func(s *state) { s.backoff = after(1) }), effect: []string{"error", "restartAfter 1s exited"}},
		{name: "ready, exited: restart after 1 s", from: at(ready), in: input{kind: inExited, err: crashed},
			want: with(at(backingOff), func(s *state) { s.backoff = after(1) }), effect: []string{"error", "restartAfter 1s exited"}},
		{name: "running, exited with the session in use: retried", from: at(running), in: input{kind: inExited, err: inUse},
			want: with(at(backingOff), func(s *state) { s.backoff, s.inUseSince = after(1), t0 }), effect: []string{"log", "restartAfter 1s"}},
		{name: "ready, exited with the session in use, host service: blocked", from: at(ready), in: input{kind: inExited, err: inUse}, pol: &withHost,
			want: with(at(blocked), func(s *state) { s.inUseSince = t0 }), effect: []string{"error", "reportBlocked " + cdv1beta1.IMEXBlockedHostIMEXInUse}},
		{name: "idle, exited (not possible): unchanged", from: at(idle), in: input{kind: inExited, err: crashed}, want: at(idle)},
		{name: "backingOff, exited (not possible): unchanged", from: at(backingOff), in: input{kind: inExited, err: crashed}, want: at(backingOff)},
		{name: "blocked, exited (not possible): unchanged", from: at(blocked), in: input{kind: inExited, err: crashed}, want: at(blocked)},

		// stopped for a restart
		{name: "running, stopped: idle, to start again", from: at(running), in: other(inStopped), want: at(idle)},
		{name: "ready, stopped: idle, to start again", from: with(at(ready), func(s *state) { s.backoff = after(1) }), in: other(inStopped), want: with(at(idle), func(s *state) { s.backoff = after(1) })},
		{name: "idle, stopped (not possible): unchanged", from: at(idle), in: other(inStopped), want: at(idle)},
		{name: "backingOff, stopped (not possible): unchanged", from: at(backingOff), in: other(inStopped), want: at(backingOff)},
		{name: "blocked, stopped (not possible): stays blocked", from: at(blocked), in: other(inStopped), want: at(blocked)},

		// readiness answered
		{name: "running, Ready: ready, backoff cleared", from: with(at(running), func(s *state) { s.backoff = after(2) }), in: input{kind: inReadiness, ready: true}, want: at(ready)},
		{name: "running, Ready, reload pending: reload", from: with(at(running), func(s *state) { s.reloadPending = true }), in: input{kind: inReadiness, ready: true},
			want: with(at(ready), func(s *state) { s.lastReload = t0 }), effect: []string{"log", "reload"}},
		{name: "running, not Ready, reload pending: look again in 1 s", from: with(at(running), func(s *state) { s.reloadPending = true }), in: input{kind: inReadiness},
			want: with(at(running), func(s *state) { s.reloadPending, s.retryArmed = true, true }), effect: []string{"debug", "retryAfter 1s"}},
		{name: "running, not Ready, backoff kept", from: with(at(running), func(s *state) { s.backoff = after(2) }), in: input{kind: inReadiness},
			want: with(at(running), func(s *state) { s.backoff = after(2) })},
		{name: "ready, Ready again: unchanged", from: at(ready), in: input{kind: inReadiness, ready: true}, want: at(ready)},
		{name: "idle, readiness (not possible): unchanged", from: at(idle), in: input{kind: inReadiness, ready: true}, want: at(idle)},
		{name: "backingOff, readiness (not possible): unchanged", from: at(backingOff), in: input{kind: inReadiness, ready: true}, want: at(backingOff)},
		{name: "blocked, readiness (not possible): unchanged", from: at(blocked), in: input{kind: inReadiness, ready: true}, want: at(blocked)},

		// timers
		{name: "backingOff, restart due: idle, to start", from: with(at(backingOff), func(s *state) { s.backoff = after(1) }), in: other(inRestartDue), want: with(at(idle), func(s *state) { s.backoff = after(1) })},
		{name: "idle, restart due: unchanged", from: at(idle), in: other(inRestartDue), want: at(idle)},
		{name: "running, restart due: unchanged", from: at(running), in: other(inRestartDue), want: at(running)},
		{name: "ready, restart due: unchanged", from: at(ready), in: other(inRestartDue), want: at(ready)},
		{name: "blocked, restart due: stays blocked", from: at(blocked), in: other(inRestartDue), want: at(blocked)},
		{name: "idle, retry due", from: with(at(idle), func(s *state) { s.retryArmed = true }), in: other(inRetryDue), want: at(idle)},
		{name: "running, retry due", from: with(at(running), func(s *state) { s.retryArmed, s.reloadPending = true, true }), in: other(inRetryDue), want: with(at(running), func(s *state) { s.reloadPending = true })},
		{name: "ready, retry due", from: with(at(ready), func(s *state) { s.retryArmed = true }), in: other(inRetryDue), want: at(ready)},
		{name: "backingOff, retry due", from: with(at(backingOff), func(s *state) { s.retryArmed = true }), in: other(inRetryDue), want: at(backingOff)},
		{name: "blocked, retry due", from: with(at(blocked), func(s *state) { s.retryArmed = true }), in: other(inRetryDue), want: at(blocked)},
	}

	covered := map[[2]int]bool{}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			p := pol
			if r.pol != nil {
				p = *r.pol
			}
			in := r.in
			in.now = t0
			got, fx := step(r.from, in, p)
			if diff := cmp.Diff(r.want, got, cmp.AllowUnexported(state{})); diff != "" {
				t.Errorf("state (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(r.effect, describe(fx)); diff != "" {
				t.Errorf("effects (-want +got):\n%s", diff)
			}
		})
		covered[[2]int{int(r.from.phase), int(r.in.kind)}] = true
	}
	for p := idle; p <= blocked; p++ {
		for k := inMembership; k <= inRetryDue; k++ {
			if !covered[[2]int{int(p), int(k)}] {
				t.Errorf("no row for input %s in phase %s", k, p)
			}
		}
	}
}

// describe renders effects as the table writes them.
func describe(fx []effect) []string {
	var out []string
	for _, e := range fx {
		s := e.kind.String()
		switch {
		case e.kind == doLog && e.err != nil:
			s = "error"
		case e.kind == doLog && e.debug:
			s = "debug"
		case e.kind == doRestartAfter || e.kind == doRetryAfter:
			s += " " + e.after.String()
		}
		if e.reason != "" {
			s += " " + e.reason
		}
		out = append(out, s)
	}
	return out
}
