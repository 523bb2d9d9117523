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
// written again in each pass: at 2,304 to 20,016 nodes joining at once, each clique was written
// 6 to 18 times, each write sent to every daemon of the clique, the apiserver's CPU going to
// the controller's writes and their events rather than to the nodes' own requests. After a pass
// that took longer than the window, the domain rests for as long as the pass took (at most
// maxPassRest): a pass that comes sooner ends at once and comes back when the rest ends. The
// controller then writes at most half the time, and a join waits for at most one rest more.
// Short passes (small domains, a quiet apiserver) are unaffected. A pass that failed after a long
// time rests too: the controller's backoff for it starts again after the rest (the rest's
// requeue resets it), so a failing large domain is retried at most every rest.
type passRests struct {
	mu    sync.Mutex
	until map[types.NamespacedName]time.Time
	// now is time.Now unless a test sets it.
	now func() time.Time
}

func newPassRests() *passRests {
	return &passRests{until: map[types.NamespacedName]time.Time{}, now: time.Now}
}

// wait returns how long key's domain still rests (0: a pass may run; always on a nil p).
func (p *passRests) wait(key types.NamespacedName) time.Duration {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	until, ok := p.until[key]
	if !ok {
		return 0
	}
	if d := until.Sub(p.now()); d > 0 {
		return d
	}
	delete(p.until, key)
	return 0
}

// passed records a pass of key's domain that began at start: longer than window, the domain rests
// as long as it took. Nothing on a nil p.
func (p *passRests) passed(key types.NamespacedName, start time.Time, window time.Duration) {
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
	p.until[key] = end.Add(min(took, maxPassRest))
}

// forget drops key's rest (the domain is gone).
func (p *passRests) forget(key types.NamespacedName) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.until, key)
}
