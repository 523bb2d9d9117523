package computedomain

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

func TestLongPassesAreFollowedByARest(t *testing.T) {
	now := time.Unix(1000, 0)
	p := newPacer(nil)
	p.now = func() time.Time { return now }
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	const window = 200 * time.Millisecond

	// A pass no longer than the window: no rest.
	start := now
	now = now.Add(window)
	p.passed(a, start, window, passHint{})
	if w := p.passWait(a); w != 0 {
		t.Errorf("after a pass of the window's length: rest %v, want none", w)
	}

	// A pass of 350 ms: the domain rests passRestFactor (2) times as long, 700 ms from its
	// end, and only that domain.
	start = now
	now = now.Add(350 * time.Millisecond)
	p.passed(a, start, window, passHint{})
	if w := p.passWait(a); w != 700*time.Millisecond {
		t.Errorf("right after a 350ms pass: rest %v, want 700ms", w)
	}
	if w := p.passWait(b); w != 0 {
		t.Errorf("another domain rests %v, want none", w)
	}
	now = now.Add(500 * time.Millisecond)
	if w := p.passWait(a); w != 200*time.Millisecond {
		t.Errorf("500ms into the rest: %v left, want 200ms", w)
	}
	now = now.Add(200 * time.Millisecond)
	if w := p.passWait(a); w != 0 {
		t.Errorf("at the rest's end: %v left, want none", w)
	}
	if d := p.domains[a]; d != nil && !d.passUntil.IsZero() {
		t.Errorf("a rest that ended is still kept")
	}

	// A very long pass rests at most maxRest; a domain that is gone rests no more.
	start = now
	now = now.Add(time.Minute)
	p.passed(a, start, window, passHint{})
	if w := p.passWait(a); w != maxRest {
		t.Errorf("after a one-minute pass: rest %v, want %v", w, maxRest)
	}
	p.forget(a)
	if w := p.passWait(a); w != 0 {
		t.Errorf("a forgotten domain rests %v", w)
	}
}

// TestAPassInARestComesBackWhenItEnds: a pass that comes while its domain rests does nothing and
// asks to come back when the rest ends.
func TestAPassInARestComesBackWhenItEnds(t *testing.T) {
	r := New(nil, nil, Options{DriverNamespace: "driver"})
	r.pacer = newPacer(newPodReadiness()) // as SetupWithManager does
	now := time.Unix(1000, 0)
	r.pacer.now = func() time.Time { return now }
	key := types.NamespacedName{Namespace: "ns", Name: "cd"}
	r.pacer.domains[key] = &pace{passUntil: now.Add(time.Second)}
	// The reconciler has no client: a pass that did anything but wait would fail.
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
	if err != nil || res.RequeueAfter != time.Second {
		t.Errorf("a pass in a rest: %+v, %v; want to come back after 1s", res, err)
	}
}

// TestWithoutAManagerEveryPassRuns: a reconciler not set up with a manager (its caller makes
// each pass it wants) keeps no rests, for passes or status writes.
func TestWithoutAManagerEveryPassRuns(t *testing.T) {
	r := New(nil, nil, Options{DriverNamespace: "driver"})
	key := types.NamespacedName{Namespace: "ns", Name: "cd"}
	r.pacer.passed(key, time.Now().Add(-time.Hour), time.Millisecond, passHint{})
	if w := r.pacer.passWait(key); w != 0 {
		t.Errorf("a reconciler without a manager rests %v", w)
	}
	r.pacer.wroteStatus(key, time.Now().Add(-time.Hour))
	if w := r.pacer.statusWait(key); w != 0 {
		t.Errorf("a reconciler without a manager holds a status write %v", w)
	}
}

// TestARestEndsWhenTheDomainsPodsTurnReady: a rest ends at once when the domain's pods, at least
// its numNodes, have all turned Ready since its pass began; it holds while they stay as that pass
// saw them (also when that pass did not find the domain Ready for another reason), when one stops
// being Ready (told after the rest), for a domain without numNodes, and after a pass that saw
// nothing of the pods (a zero hint).
func TestARestEndsWhenTheDomainsPodsTurnReady(t *testing.T) {
	ready := newPodReadiness()
	p := newPacer(ready)
	now := time.Unix(1000, 0)
	p.now = func() time.Time { return now }
	key := types.NamespacedName{Namespace: "ns", Name: "cd"}
	const window = 200 * time.Millisecond
	pass := func(numNodes int) {
		t.Helper()
		h := p.hint("d1", numNodes)
		start := now
		now = now.Add(time.Second / passRestFactor) // a rest of 1s
		p.passed(key, start, window, h)
	}
	a, b := daemonPod("a", "d1", true), daemonPod("b", "d1", false)
	ready.observe(nil, a, false)
	ready.observe(nil, b, false)

	pass(2)
	if w := p.passWait(key); w != time.Second {
		t.Fatalf("after a pass with one pod of two Ready: rest %v, want 1s", w)
	}
	bReady := daemonPod("b", "d1", true)
	ready.observe(b, bReady, false)
	if w := p.passWait(key); w != 0 {
		t.Errorf("the pods all turned Ready during the rest: rest %v, want it ended", w)
	}
	if d := p.domains[key]; d != nil && !d.passUntil.IsZero() {
		t.Errorf("a rest that ended early is still kept")
	}

	// The next pass saw them all Ready: its rest holds while they stay so, whatever that pass
	// found (it may not have made the domain Ready), and also when one stops being Ready.
	pass(2)
	now = now.Add(100 * time.Millisecond)
	if w := p.passWait(key); w != 900*time.Millisecond {
		t.Errorf("pods unchanged since the pass: rest %v left, want 900ms", w)
	}
	ready.observe(bReady, b, false)
	now = now.Add(100 * time.Millisecond)
	if w := p.passWait(key); w != 800*time.Millisecond {
		t.Errorf("a pod stopped being Ready during the rest: rest %v left, want 800ms", w)
	}

	// A domain without numNodes: every join turns its pods not all Ready and back; its rests hold.
	now = now.Add(time.Second)
	pass(0)
	ready.observe(b, bReady, false)
	if w := p.passWait(key); w != time.Second {
		t.Errorf("a domain without numNodes whose pods turned Ready: rest %v, want 1s", w)
	}

	// A pass without a hint (no readiness followed, or no domain read) rests in full.
	ready.observe(bReady, b, false)
	now = now.Add(time.Second)
	start := now
	now = now.Add(time.Second / passRestFactor)
	p.passed(key, start, window, passHint{})
	ready.observe(b, bReady, false)
	if w := p.passWait(key); w != time.Second {
		t.Errorf("a rest after a pass without a hint: %v, want 1s", w)
	}
	if h := newPacer(nil).hint("d1", 2); h != (passHint{}) {
		t.Errorf("rests without readiness give the hint %+v, want none", h)
	}
}

// TestAStatusRestsFourTimesAsLongAsItsWriteTook: after a status write the domain's status rests
// statusRestFactor times as long as the write took (at most maxRest); passes and other domains are
// not held by it.
func TestAStatusRestsFourTimesAsLongAsItsWriteTook(t *testing.T) {
	now := time.Unix(1000, 0)
	p := newPacer(nil)
	p.now = func() time.Time { return now }
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}

	if w := p.statusWait(a); w != 0 {
		t.Errorf("before any write: status rest %v, want none", w)
	}
	start := now
	now = now.Add(200 * time.Millisecond)
	p.wroteStatus(a, start)
	if w := p.statusWait(a); w != 800*time.Millisecond {
		t.Errorf("right after a 200ms write: status rest %v, want 800ms", w)
	}
	if w := p.statusWait(b); w != 0 {
		t.Errorf("another domain's status waits %v, want none", w)
	}
	if w := p.passWait(a); w != 0 {
		t.Errorf("a status rest holds the pass %v, want none", w)
	}
	now = now.Add(300 * time.Millisecond)
	if w := p.statusWait(a); w != 500*time.Millisecond {
		t.Errorf("300ms into the rest: %v left, want 500ms", w)
	}
	now = now.Add(500 * time.Millisecond)
	if w := p.statusWait(a); w != 0 {
		t.Errorf("at the rest's end: %v left, want none", w)
	}

	// A very long write rests at most maxRest; a forgotten domain not at all.
	start = now
	now = now.Add(time.Minute)
	p.wroteStatus(a, start)
	if w := p.statusWait(a); w != maxRest {
		t.Errorf("after a one-minute write: status rest %v, want %v", w, maxRest)
	}
	p.forget(a)
	if w := p.statusWait(a); w != 0 {
		t.Errorf("a forgotten domain's status rests %v", w)
	}
}

// TestReadyFlipsWaitForTheNextWriteOrTheRest: a clique change that only turns entries Ready is
// held in a domain whose last pass was long, for at most maxRest from when it was first held,
// and no longer once the clique is written; a domain whose passes are short holds nothing.
func TestReadyFlipsWaitForTheNextWriteOrTheRest(t *testing.T) {
	now := time.Unix(1000, 0)
	p := newPacer(nil)
	p.now = func() time.Time { return now }
	key := types.NamespacedName{Namespace: "ns", Name: "cd"}
	const window = 200 * time.Millisecond

	if w := p.holdReady(key, "c1"); w != 0 {
		t.Errorf("a domain without a pass yet holds %v, want nothing", w)
	}
	start := now
	now = now.Add(window)
	p.passed(key, start, window, passHint{})
	if w := p.holdReady(key, "c1"); w != 0 {
		t.Errorf("after a short pass: held %v, want nothing", w)
	}

	start = now
	now = now.Add(time.Second)
	p.passed(key, start, window, passHint{})
	if w := p.holdReady(key, "c1"); w != maxRest {
		t.Errorf("after a long pass, first held: %v, want %v", w, maxRest)
	}
	now = now.Add(2 * time.Second)
	if w := p.holdReady(key, "c1"); w != maxRest-2*time.Second {
		t.Errorf("2s later: %v left, want %v (the hold counts from when it began)", w, maxRest-2*time.Second)
	}
	if w := p.holdReady(key, "c2"); w != maxRest {
		t.Errorf("another clique, first held now: %v, want %v", w, maxRest)
	}
	now = now.Add(maxRest)
	if w := p.holdReady(key, "c1"); w != 0 {
		t.Errorf("past maxRest: still held %v", w)
	}

	// A write of the clique ends its hold: the next flip starts a new one.
	p.wroteClique(key, "c1")
	if w := p.holdReady(key, "c1"); w != maxRest {
		t.Errorf("after a write, held again: %v, want a new hold of %v", w, maxRest)
	}

	// The next pass is short: nothing is held, whatever was.
	start = now
	now = now.Add(window / 2)
	p.passed(key, start, window, passHint{})
	if w := p.holdReady(key, "c2"); w != 0 {
		t.Errorf("after a short pass: held %v, want nothing", w)
	}
	var nilPacer *pacer
	if w := nilPacer.holdReady(key, "c1"); w != 0 {
		t.Errorf("without a pacer: held %v", w)
	}
}
