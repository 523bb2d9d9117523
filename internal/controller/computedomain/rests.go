package computedomain

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// maxPassRest bounds how long a domain rests after a pass.
const maxPassRest = 5 * time.Second

// passRests spaces a domain's passes when they are long. The batch window gathers the events of
// a burst into one pass; but while a pass runs, the next burst's events queue the domain again,
// and a pass that takes longer than the window (a large domain on a busy apiserver: seconds) is
// followed at once by the next. Back to back, every clique that gained a member in between is
// written again in each pass: in a burst of joins each clique was written many times over,
// each write sent to every daemon of the clique, the apiserver's CPU going to the controller's
// writes and their events rather than to the nodes' own requests. After a pass that took longer
// than the window, the domain rests for as long as the pass took (at most maxPassRest): a pass
// that comes sooner ends at once and comes back when the rest ends. The
// controller then writes at most half the time, and a join waits for at most one rest more.
// Short passes (small domains, a quiet apiserver) are unaffected. A pass that failed after a long
// time rests too: the controller's backoff for it starts again after the rest (the rest's
// requeue resets it), so a failing large domain is retried at most every rest.
//
// A rest ends early for the pass that may turn a domain Ready: when the domain's pods (ready,
// kept by the pod event handler), at least its numNodes, have all turned Ready since the pass
// before the rest began, a pass runs at once. The status write that follows waits for no rest
// either (see statusWrites): otherwise the last pod Ready waits out a rest before the pass that
// writes the domain Ready (see docs/scale.md, "Design choices and what was measured"). Only
// that way, and only with numNodes set: with numNodes 0, or pods joining a domain that has its
// numNodes, every join turns the pods not all Ready and then all Ready again, and ending rests
// on both would undo the pacing in a burst; a domain that stops being Ready is told after the
// rest (at most maxPassRest).
type passRests struct {
	mu    sync.Mutex
	rests map[types.NamespacedName]passRest
	// ready is the domain's pods' readiness, or nil (no rest ends early).
	ready *podReadiness
	// now is time.Now unless a test sets it.
	now func() time.Time
}

// passRest is one domain's rest: until when, and which pods end it early (see passHint).
type passRest struct {
	until time.Time
	hint  passHint
}

// passHint names the domain (by UID, with its numNodes) whose labelled pods were not all Ready,
// at least numNodes of them, as a pass began: their turning so ends the rest after that pass. A
// zero hint (no readiness followed, numNodes 0, or the pods already all Ready) ends no rest.
type passHint struct {
	uid      string
	numNodes int
}

func newPassRests(ready *podReadiness) *passRests {
	return &passRests{rests: map[types.NamespacedName]passRest{}, ready: ready, now: time.Now}
}

// hint returns the hint for the domain uid as its pods are now: zero on a nil p, for a domain
// without numNodes, or when they are all Ready already.
func (p *passRests) hint(uid string, numNodes int) passHint {
	if p == nil || p.ready == nil || uid == "" || numNodes <= 0 || p.ready.allReady(uid, numNodes) {
		return passHint{}
	}
	return passHint{uid: uid, numNodes: numNodes}
}

// wait returns how long key's domain still rests (0: a pass may run; always on a nil p). A rest
// whose domain's pods all turned Ready since its pass began ends now.
func (p *passRests) wait(key types.NamespacedName) time.Duration {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	rest, ok := p.rests[key]
	if !ok {
		return 0
	}
	d := rest.until.Sub(p.now())
	if d > 0 && !p.turned(rest.hint) {
		return d
	}
	delete(p.rests, key)
	return 0
}

// turned reports whether the domain's pods have all turned Ready since h was taken (false for a
// zero h).
func (p *passRests) turned(h passHint) bool {
	return h.uid != "" && p.ready.allReady(h.uid, h.numNodes)
}

// passed records a pass of key's domain that began at start, seeing h: longer than window, the
// domain rests as long as it took. Nothing on a nil p.
func (p *passRests) passed(key types.NamespacedName, start time.Time, window time.Duration, h passHint) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	end := p.now()
	took := end.Sub(start)
	if took <= window {
		return
	}
	p.rests[key] = passRest{until: end.Add(min(took, maxPassRest)), hint: h}
}

// forget drops key's rest (the domain is gone).
func (p *passRests) forget(key types.NamespacedName) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.rests, key)
}
