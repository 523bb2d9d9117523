package e2e

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
)

// sampleInterval is how often a readySampler reads each domain.
const sampleInterval = 500 * time.Millisecond

// readySampler reads the status of a set of live domains every sampleInterval, from start
// until check, and counts what each read found. A scenario that must keep domains Ready
// across something (a gate flip, an upgrade, a restart) starts one before that something
// begins, so a domain that turns NotReady for a second in the middle is seen. Failed reads
// (the apiserver restarting, a client reconnecting) are counted, not ignored: check requires
// a minimum number of successful reads, so a sampler that could read nothing cannot pass.
type readySampler struct {
	mu       sync.Mutex
	cds      []*cdv1beta1.ComputeDomain
	reads    int // successful reads
	failed   int
	notReady int
	firstBad string
	lastErr  error
	started  time.Time

	stop chan struct{}
	wg   sync.WaitGroup
}

// sampleReady starts sampling cds; the test's cleanup stops it.
func sampleReady(t *testing.T, cds ...*cdv1beta1.ComputeDomain) *readySampler {
	t.Helper()
	s := &readySampler{cds: cds, stop: make(chan struct{}), started: time.Now()}
	s.wg.Go(s.run)
	t.Cleanup(s.halt)
	return s
}

func (s *readySampler) run() {
	tick := time.NewTicker(sampleInterval)
	defer tick.Stop()
	for {
		s.mu.Lock()
		cds := slices.Clone(s.cds)
		s.mu.Unlock()
		for _, cd := range cds {
			cur := &cdv1beta1.ComputeDomain{}
			err := c.Get(ctx(), client.ObjectKeyFromObject(cd), cur)
			s.record(cur, err)
		}
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
	}
}

func (s *readySampler) record(cur *cdv1beta1.ComputeDomain, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.failed++
		s.lastErr = err
		return
	}
	s.reads++
	if cur.Status.Status != cdv1beta1.StatusReady {
		s.notReady++
		if s.firstBad == "" {
			s.firstBad = fmt.Sprintf("%s/%s %q at %s", cur.Namespace, cur.Name, cur.Status.Status, time.Now().Format(time.TimeOnly))
		}
	}
}

// set replaces the sampled domains (a domain between two jobs is NotReady by design).
func (s *readySampler) set(cds ...*cdv1beta1.ComputeDomain) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cds = cds
}

// successful is the number of successful reads so far.
func (s *readySampler) successful() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

func (s *readySampler) halt() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.wg.Wait()
}

// check stops the sampler and fails the test if any read found a domain not Ready, or fewer
// than minReads reads succeeded.
func (s *readySampler) check(t *testing.T, what string, minReads int) {
	t.Helper()
	s.halt()
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Logf("%s: %d reads of the live domains' status in %s (%d failed), %d not Ready",
		what, s.reads, time.Since(s.started).Round(time.Second), s.failed, s.notReady)
	if s.notReady > 0 {
		t.Errorf("%s: a live domain was not Ready in %d of %d reads (first: %s)", what, s.notReady, s.reads, s.firstBad)
	}
	if s.reads < minReads {
		t.Errorf("%s: only %d reads of the live domains' status succeeded, want at least %d (%d failed, last: %v)", what, s.reads, minReads, s.failed, s.lastErr)
	}
}

// expectedReads is the least number of successful reads to require of a sampler of n domains
// that ran for d: a third of what it would make if every read were instant, so a loaded
// machine passes and a sampler that read almost nothing does not.
func expectedReads(n int, d time.Duration) int {
	return max(1, n*int(d/sampleInterval)/3)
}
