package computedomain

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// maxRest bounds how long a domain's passes or status writes rest.
const maxRest = 5 * time.Second

// passRestFactor is how many times as long as a long pass took the domain rests after it (see
// pacer).
const passRestFactor = 2

// statusRestFactor is how many times as long as a status write took the status rests after it
// (see pacer).
const statusRestFactor = 4

// pacer spaces the passes and status writes of large domains, each by a rest as long as the last
// one took; small domains on a quiet apiserver are not held (see docs/scale.md, "Design choices
// and what was measured"). A pass that is held ends at once with a requeue for the rest's end.
//
// Passes. The batch window gathers a burst's events into one pass; but while a pass runs, the
// next events queue the domain again, and a pass longer than the window (a large domain on a busy
// apiserver: seconds) would be followed at once by the next. Back to back, every clique that
// gained a member in between is written again in every pass, each write sent to every daemon of
// the clique: the apiserver's time goes to the controller's writes and their events rather than
// to the nodes' own requests. After a pass longer than the window the domain rests
// passRestFactor times as long as the pass took (at most maxRest): the controller's passes take
// at most a third of the time, each carries the joins of a longer stretch (fewer writes of each
// clique, each sent to all its daemons), and a join waits for at most one rest more. A pass that
// failed after a long time rests too, so a failing large domain is retried at most every rest.
//
// A pass rest ends early for the pass that may turn the domain Ready: when the domain's pods (at
// least its numNodes, followed by the pod event handler) have all turned Ready since the pass
// before the rest began. Only with numNodes set: with numNodes 0, or pods joining a domain that
// has its numNodes, every join turns the pods not all Ready and then all Ready again, and ending
// rests on both would undo the pacing in a burst; a domain that stops being Ready is told after
// the rest.
//
// Status writes (membership in cliques only: there the daemons never wait for the domain's
// status). A status of thousands of entries costs the apiserver far more than a clique write, and
// in a burst of joins it changes in every pass. After each write the domain's status rests
// statusRestFactor times as long as the write took (at most maxRest), so that its writes hold
// the apiserver at most a fifth of the time: a pass in that time whose status says the same of
// the domain as a whole (status.status) as the domain says now does not write it and asks for a
// pass when the rest ends. The write that turns the domain Ready (or NotReady) never waits; the
// counts of a large domain still joining show at most maxRest late.
//
// Clique writes that only turn entries Ready, in a large domain (its last pass longer than the
// window). Every write of a clique goes to every daemon watching it, and in a burst all of a
// clique's daemons watch it from the start; while the pods' Ready patches trickle in, each pass
// would write most cliques again for a flip or two. A flip changes nothing a daemon acts on (its
// IMEX peers are the entries, not their readiness), so such a change waits for the clique's next
// write that adds or changes an entry, which carries it, or for maxRest after it was first held,
// whichever comes first. The pass that turns the domain Ready writes every flip at once, and an
// entry turning NotReady is never held. Only the kubelet plugins act on a flip (a workload's
// channel waits for its node's entry to be Ready); in such a burst they wait at most maxRest
// longer. Where passes come further apart than maxRest (the largest domains), a hold ends
// before the next pass and holds nothing; a longer hold made no clear difference there and
// was slower in smaller bursts (docs/scale.md).
type pacer struct {
	mu      sync.Mutex
	domains map[types.NamespacedName]*pace
	// ready is the domains' pods' readiness, or nil (no pass rest ends early).
	ready *podReadiness
	// now is time.Now unless a test sets it.
	now func() time.Time
}

// pace is one domain's rests.
type pace struct {
	// passUntil is when the domain's pass rest ends; hint names the pods whose turning all Ready
	// ends it early.
	passUntil time.Time
	hint      passHint
	// statusUntil is when the rest after the last status write ends.
	statusUntil time.Time
	// long is whether the domain's last pass took longer than the window.
	long bool
	// heldSince is, by clique name, when a change of the clique that only turns entries Ready
	// was first held (see holdReady).
	heldSince map[string]time.Time
}

// passHint names the domain (by UID, with its numNodes) whose labelled pods were not all Ready,
// at least numNodes of them, as a pass began: their turning so ends the rest after that pass. A
// zero hint (no readiness followed, numNodes 0, or the pods already all Ready) ends no rest.
type passHint struct {
	uid      string
	numNodes int
}

func newPacer(ready *podReadiness) *pacer {
	return &pacer{domains: map[types.NamespacedName]*pace{}, ready: ready, now: time.Now}
}

// clock returns the time as p tells it (time.Now on a nil p).
func (p *pacer) clock() time.Time {
	if p == nil {
		return time.Now()
	}
	return p.now()
}

// hint returns the hint for the domain uid as its pods are now: zero on a nil p, for a domain
// without numNodes, or when they are all Ready already.
func (p *pacer) hint(uid string, numNodes int) passHint {
	if p == nil || p.ready == nil || uid == "" || numNodes <= 0 || p.ready.allReady(uid, numNodes) {
		return passHint{}
	}
	return passHint{uid: uid, numNodes: numNodes}
}

// passWait returns how long key's domain still rests before its next pass (0: a pass may run;
// always on a nil p). A rest whose domain's pods all turned Ready since its pass began ends now.
func (p *pacer) passWait(key types.NamespacedName) time.Duration {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.domains[key]
	if d == nil {
		return 0
	}
	wait := d.passUntil.Sub(p.now())
	if wait > 0 && !p.turned(d.hint) {
		return wait
	}
	d.passUntil, d.hint = time.Time{}, passHint{}
	return 0
}

// turned reports whether the domain's pods have all turned Ready since h was taken (false for a
// zero h).
func (p *pacer) turned(h passHint) bool {
	return h.uid != "" && p.ready.allReady(h.uid, h.numNodes)
}

// passed records a pass of key's domain that began at start, seeing h: longer than window, the
// domain rests as long as it took. Nothing on a nil p.
func (p *pacer) passed(key types.NamespacedName, start time.Time, window time.Duration, h passHint) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	end := p.now()
	took := end.Sub(start)
	d := p.domains[key]
	if took > window {
		d = p.domain(key)
		d.passUntil, d.hint = end.Add(min(passRestFactor*took, maxRest)), h
	}
	if d != nil {
		d.long = took > window
	}
}

// holdReady returns how long a change of key's domain's clique that only turns entries Ready
// should still wait (0: write it now; always on a nil p, and for a domain whose last pass took
// no longer than the window). The first call for a clique starts its hold, which lasts at most
// maxRest; wrote ends it.
func (p *pacer) holdReady(key types.NamespacedName, clique string) time.Duration {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.domains[key]
	if d == nil || !d.long {
		return 0
	}
	now := p.now()
	since, ok := d.heldSince[clique]
	if !ok {
		if d.heldSince == nil {
			d.heldSince = map[string]time.Time{}
		}
		d.heldSince[clique], since = now, now
	}
	return max(since.Add(maxRest).Sub(now), 0)
}

// wroteClique records a write of key's domain's clique: a hold of it ends.
func (p *pacer) wroteClique(key types.NamespacedName, clique string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if d := p.domains[key]; d != nil {
		delete(d.heldSince, clique)
	}
}

// statusWait returns how long key's domain's status still rests after its last write (0: none;
// always on a nil p). The caller holds only a status that says the same of the domain as a whole
// as the domain says now.
func (p *pacer) statusWait(key types.NamespacedName) time.Duration {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.domains[key]
	if d == nil {
		return 0
	}
	return max(d.statusUntil.Sub(p.now()), 0)
}

// wroteStatus records a status write of key's domain that began at start: the status rests
// statusRestFactor times as long as the write took.
func (p *pacer) wroteStatus(key types.NamespacedName, start time.Time) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	end := p.now()
	p.domain(key).statusUntil = end.Add(min(statusRestFactor*end.Sub(start), maxRest))
}

// domain returns key's pace, made when missing. Callers hold p.mu.
func (p *pacer) domain(key types.NamespacedName) *pace {
	d := p.domains[key]
	if d == nil {
		d = &pace{}
		p.domains[key] = d
	}
	return d
}

// forget drops key's rests (the domain is gone, or being deleted).
func (p *pacer) forget(key types.NamespacedName) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.domains, key)
}
