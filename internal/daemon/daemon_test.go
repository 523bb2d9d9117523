package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/imex"
	"cdplane/internal/scheme"
	"cdplane/internal/testutil"
)

// waitLimit bounds every wait for the supervisor's loop; nothing here sleeps.
const waitLimit = 10 * time.Second

// fakeIMEX records Start, Reload and Stop in order, keeps the interface's contract (one run at
// a time, no Reload without a run) and lets the test end a run.
type fakeIMEX struct {
	calls chan string

	mu       sync.Mutex
	run      chan error // the current run's end; nil when not running
	startErr error      // returned by the next Start
	stopErr  error      // returned by every Stop
	notReady error      // returned by Ready while set
}

func newFakeIMEX() *fakeIMEX { return &fakeIMEX{calls: make(chan string, 64)} }

// Each call is recorded once its effect is in place, so that a test that saw the call can act
// on the run it started or ended.

func (f *fakeIMEX) Start(context.Context) (<-chan error, error) {
	defer func() { f.calls <- "Start" }()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.startErr != nil {
		err := f.startErr
		f.startErr = nil
		return nil, err
	}
	if f.run != nil {
		return nil, imex.ErrAlreadyRunning
	}
	f.run = make(chan error, 1)
	return f.run, nil
}

func (f *fakeIMEX) Reload() error {
	defer func() { f.calls <- "Reload" }()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.run == nil {
		return imex.ErrNotRunning
	}
	return nil
}

func (f *fakeIMEX) Stop(context.Context) error {
	defer func() { f.calls <- "Stop" }()
	f.end(nil)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stopErr
}

func (f *fakeIMEX) Ready(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.notReady
}

func (f *fakeIMEX) setReady(ready bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notReady = nil
	if !ready {
		f.notReady = fmt.Errorf("%w: the fake answers NOT_READY", imex.ErrNotReady)
	}
}

func (f *fakeIMEX) failNextStart(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.startErr = err
}

func (f *fakeIMEX) failStop(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopErr = err
}

// end ends the current run with err, as IMEX exiting does.
func (f *fakeIMEX) end(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.run != nil {
		f.run <- err
		close(f.run)
		f.run = nil
	}
}

// fakeView is the clique's membership as the test sets it.
type fakeView struct {
	mu       sync.Mutex
	unsynced int // how many update calls report an incomplete view before it is complete
	members  []imex.Peer
	// numNodes, when set, is the domain's numNodes, and the domain lists its members: the view
	// watches the domain (IP mode); zero: the clique holds the membership.
	numNodes int
	// readyNodes are the members whose entry is Ready.
	readyNodes map[string]bool
}

func (v *fakeView) ready(node string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.readyNodes[node]
}

// setReady sets whether node's entry is Ready.
func (v *fakeView) setReady(node string, ready bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.readyNodes == nil {
		v.readyNodes = map[string]bool{}
	}
	v.readyNodes[node] = ready
}

func (v *fakeView) domainSize() (int, int, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.members), v.numNodes, v.numNodes > 0
}

func (v *fakeView) update() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.unsynced > 0 {
		v.unsynced--
		return false
	}
	return true
}

func (v *fakeView) peers(node string) ([]imex.Peer, *imex.Peer) {
	v.mu.Lock()
	defer v.mu.Unlock()
	peers := slices.Clone(v.members)
	slices.SortFunc(peers, func(a, b imex.Peer) int { return a.Index - b.Index })
	for i := range peers {
		if peers[i].NodeName == node {
			self := peers[i]
			return peers, &self
		}
	}
	return peers, nil
}

func (v *fakeView) set(members ...imex.Peer) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.members = members
}

// peer is clique member nN with index N-1 at 127.0.0.N.
func peer(n int) imex.Peer {
	return imex.Peer{NodeName: fmt.Sprintf("n%d", n), IPAddress: fmt.Sprintf("127.0.0.%d", n), Index: n - 1}
}

// timer is one timer the supervisor asked for; fire makes it go off.
type timer struct {
	d time.Duration
	c chan time.Time
}

func (tm timer) fire() { tm.c <- time.Time{} }

// harness runs a supervisor's loop for node n1 (peer(1)) with a fake IMEX, a fake view and fake
// timers.
type harness struct {
	t      *testing.T
	imex   *fakeIMEX
	view   *fakeView
	cfg    Config
	timers chan timer
	notify chan struct{}
	cancel context.CancelFunc
	done   chan error
	// reports receives the reasons the supervisor reported IMEX blocked for.
	reports chan string

	stopOnce sync.Once
	result   error // what the loop returned

	clockMu sync.Mutex
	clock   time.Time // the supervisor's now; moves only with advance
}

// now is the supervisor's clock.
func (h *harness) now() time.Time {
	h.clockMu.Lock()
	defer h.clockMu.Unlock()
	return h.clock
}

// advance moves the supervisor's clock.
func (h *harness) advance(d time.Duration) {
	h.clockMu.Lock()
	defer h.clockMu.Unlock()
	h.clock = h.clock.Add(d)
}

type setup struct {
	dnsNames       bool
	restartBackoff time.Duration
	// sessionInUseRetry is Deps.SessionInUseRetry.
	sessionInUseRetry time.Duration
	// hostIMEXService is Config.HostIMEXService.
	hostIMEXService string
	unsynced        int
	// log receives the supervisor's log; the test's log when unset.
	log logr.Logger
	// metrics records the supervisor's events; nil: none.
	metrics *Metrics
}

// testUID is the domain UID of the supervisor tests' daemon.
const testUID = "0b6c9a4e-1f2d-4c3b-8a5e-6d7f8091a2b3"

// imexName is the IMEX name of a slot of the test domain.
func imexName(index int) string { return imex.Settings{DomainUID: testUID}.Name(index) }

func start(t *testing.T, s setup, members ...imex.Peer) *harness {
	t.Helper()
	dir := t.TempDir()
	h := &harness{
		t: t, imex: newFakeIMEX(), view: &fakeView{unsynced: s.unsynced, members: members},
		cfg: Config{
			NodeName: "n1", PodIP: peer(1).IPAddress, CliqueID: "c.1", CDUID: testUID, MaxNodes: 18, DNSNames: s.dnsNames,
			ConfigDir: dir, HostsPath: filepath.Join(dir, "hosts"), HostIMEXService: s.hostIMEXService,
		},
		timers: make(chan timer, 64), notify: make(chan struct{}), done: make(chan error, 1), reports: make(chan string, 8),
		clock: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
	}
	log := s.log
	if log.GetSink() == nil {
		log = testr.NewWithOptions(t, testr.Options{Verbosity: 1})
	}
	sup := &supervisor{
		cfg: h.cfg, deps: Deps{IMEX: h.imex, Log: log, RestartBackoff: s.restartBackoff, SessionInUseRetry: s.sessionInUseRetry, Metrics: s.metrics}, view: h.view, log: log,
		after: func(d time.Duration) <-chan time.Time {
			c := make(chan time.Time, 1)
			h.timers <- timer{d: d, c: c}
			return c
		},
		now:    h.now,
		report: func(_ context.Context, reason, _ string) { h.reports <- reason },
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- sup.loop(ctx, h.notify) }()
	// What the loop returns is checked by the tests that stop it themselves.
	t.Cleanup(func() { _ = h.stop() })
	return h
}

// expectTimer waits for the supervisor's next timer and checks its duration.
func (h *harness) expectTimer(d time.Duration) timer {
	h.t.Helper()
	select {
	case tm := <-h.timers:
		if tm.d != d {
			h.t.Fatalf("the supervisor set a timer of %s, want %s", tm.d, d)
		}
		return tm
	case <-time.After(waitLimit):
		h.t.Fatalf("no timer of %s within %s", d, waitLimit)
	}
	return timer{}
}

// expectCalls waits for the next calls to IMEX and checks them.
func (h *harness) expectCalls(want ...string) {
	h.t.Helper()
	var got []string
	for range want {
		select {
		case c := <-h.imex.calls:
			got = append(got, c)
		case <-time.After(waitLimit):
			h.t.Fatalf("IMEX calls %v, want %v (nothing more within %s)", got, want, waitLimit)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		h.t.Fatalf("IMEX calls (-want +got):\n%s", diff)
	}
}

// expectNoCalls checks that IMEX was not called since the last expectCalls, once the loop has
// finished what it was doing.
func (h *harness) expectNoCalls() {
	h.t.Helper()
	h.settle()
	select {
	case c := <-h.imex.calls:
		h.t.Fatalf("unexpected IMEX call %s", c)
	default:
	}
}

// poke tells the supervisor that membership changed; it returns once the loop took the event,
// that is once it finished whatever it did before.
func (h *harness) poke() {
	h.t.Helper()
	select {
	case h.notify <- struct{}{}:
	case <-time.After(waitLimit):
		h.t.Fatalf("the supervisor did not take a membership event within %s", waitLimit)
	}
}

// settle returns once the loop has handled everything sent so far: the second event is taken
// only after the pass for the first one is over.
func (h *harness) settle() {
	h.t.Helper()
	h.poke()
	h.poke()
}

// firstStart lets the loop's first look happen and expects IMEX to start.
func (h *harness) firstStart() {
	h.t.Helper()
	h.expectTimer(50 * time.Millisecond).fire()
	h.expectCalls("Start")
}

// stop ends the supervisor's context and returns what its loop returned; it may be called
// more than once.
func (h *harness) stop() error {
	h.t.Helper()
	h.stopOnce.Do(func() {
		h.cancel()
		select {
		case h.result = <-h.done:
		case <-time.After(waitLimit):
			h.t.Errorf("the supervisor did not return within %s of its context ending", waitLimit)
		}
	})
	return h.result
}

func TestSupervisorFirstStartSendsNoReload(t *testing.T) {
	for name, dnsNames := range map[string]bool{"DNS names": true, "IP addresses": false} {
		t.Run(name, func(t *testing.T) {
			// The node's own entry comes after another's: nothing starts until it is there, and
			// the membership seen before the start causes no reload after it.
			h := start(t, setup{dnsNames: dnsNames}, peer(2))
			h.expectTimer(50 * time.Millisecond).fire()
			h.expectNoCalls()
			h.view.set(peer(1), peer(2))
			h.poke()
			h.expectCalls("Start")
			h.expectNoCalls()

			nodes, err := os.ReadFile(h.cfg.NodesConfigPath())
			if err != nil {
				t.Fatalf("IMEX started without its nodes config: %v", err)
			}
			if !dnsNames && string(nodes) != "127.0.0.1\n127.0.0.2\n" {
				t.Errorf("nodes config %q, want both peers' addresses", nodes)
			}
			if hosts, err := os.ReadFile(h.cfg.HostsPath); dnsNames && (err != nil || !strings.Contains(string(hosts), "127.0.0.2\t"+imexName(1))) {
				t.Errorf("hosts file %q, %v; want the peer's name in it", hosts, err)
			}
			if _, err := os.Stat(h.cfg.IMEXConfigPath()); err != nil {
				t.Errorf("IMEX started without its config: %v", err)
			}
		})
	}
}

func TestSupervisorActsOnMembershipChanges(t *testing.T) {
	moved := peer(2)
	moved.IPAddress = "127.0.0.99"
	cases := map[string]struct {
		dnsNames bool
		after    []imex.Peer
		want     []string
	}{
		"DNS names: a peer joins: reload":                 {dnsNames: true, after: []imex.Peer{peer(1), peer(2), peer(3)}, want: []string{"Reload"}},
		"DNS names: a peer leaves: reload":                {dnsNames: true, after: []imex.Peer{peer(1)}, want: []string{"Reload"}},
		"DNS names: a peer's address changes: reload":     {dnsNames: true, after: []imex.Peer{peer(1), moved}, want: []string{"Reload"}},
		"DNS names: no change: nothing":                   {dnsNames: true, after: []imex.Peer{peer(1), peer(2)}},
		"IP addresses: a peer joins: restart":             {after: []imex.Peer{peer(1), peer(2), peer(3)}, want: []string{"Stop", "Start"}},
		"IP addresses: a peer leaves: restart":            {after: []imex.Peer{peer(1)}, want: []string{"Stop", "Start"}},
		"IP addresses: a peer's address changes: restart": {after: []imex.Peer{peer(1), moved}, want: []string{"Stop", "Start"}},
		"IP addresses: no change: nothing":                {after: []imex.Peer{peer(1), peer(2)}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := start(t, setup{dnsNames: tc.dnsNames}, peer(1), peer(2))
			h.firstStart()
			h.view.set(tc.after...)
			h.poke()
			h.expectCalls(tc.want...)
			h.expectNoCalls()
		})
	}
}

// After IMEX exits the supervisor waits, then starts it again; the wait doubles with each exit
// in a row and stops growing at the cap.
func TestSupervisorRestartsWithBackoff(t *testing.T) {
	s := time.Second
	cases := map[string]struct {
		first time.Duration
		want  []time.Duration
	}{
		"default first delay": {want: []time.Duration{1 * s, 2 * s, 4 * s, 8 * s, 16 * s, 30 * s, 30 * s}},
		"first delay 5s":      {first: 5 * s, want: []time.Duration{5 * s, 10 * s, 20 * s, 30 * s, 30 * s}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := start(t, setup{dnsNames: true, restartBackoff: tc.first}, peer(1), peer(2))
			h.firstStart()
			for _, d := range tc.want {
				h.imex.end(&imex.ExitError{Binary: "nvidia-imex", Code: 1})
				restart := h.expectTimer(d)
				h.expectNoCalls() // not before the delay
				restart.fire()
				h.expectCalls("Start")
			}
		})
	}
}

// A start that fails is retried after the same backoff as an exit.
func TestSupervisorRetriesFailedStartWithBackoff(t *testing.T) {
	h := start(t, setup{dnsNames: true}, peer(1))
	h.imex.failNextStart(errors.New("no such file"))
	h.expectTimer(50 * time.Millisecond).fire()
	h.expectCalls("Start")
	h.expectTimer(time.Second).fire()
	h.expectCalls("Start")
	h.imex.end(errors.New("exited"))
	h.expectTimer(2 * time.Second)
}

// Membership changes during the backoff update the files but do not start IMEX early; the
// start when the delay is over sends no reload.
func TestSupervisorWaitsOutTheBackoff(t *testing.T) {
	h := start(t, setup{dnsNames: true}, peer(1), peer(2))
	h.firstStart()
	h.imex.end(errors.New("exited"))
	restart := h.expectTimer(time.Second)
	h.view.set(peer(1), peer(2), peer(3))
	h.poke()
	h.expectNoCalls()
	hosts, err := os.ReadFile(h.cfg.HostsPath)
	if err != nil || !strings.Contains(string(hosts), "127.0.0.3\t"+imexName(2)) {
		t.Errorf("hosts file after a join during the backoff: %q, %v; want the new peer in it", hosts, err)
	}
	restart.fire()
	h.expectCalls("Start")
	h.expectNoCalls()
}

// A pass that finds nothing to do while IMEX runs counts as a stable run: the next exit waits
// the first delay again.
func TestSupervisorStableRunResetsBackoff(t *testing.T) {
	h := start(t, setup{dnsNames: true}, peer(1))
	h.firstStart()
	h.imex.end(errors.New("exited"))
	h.expectTimer(time.Second).fire()
	h.expectCalls("Start")
	h.imex.end(errors.New("exited"))
	h.expectTimer(2 * time.Second).fire()
	h.expectCalls("Start")
	h.settle() // passes with nothing to do
	h.imex.end(errors.New("exited"))
	h.expectTimer(time.Second)
}

// A view whose watches have not synced is looked at again, and nothing starts until it has.
func TestSupervisorWaitsForTheViewToSync(t *testing.T) {
	h := start(t, setup{dnsNames: true, unsynced: 2}, peer(1))
	h.expectTimer(50 * time.Millisecond).fire()
	h.expectTimer(100 * time.Millisecond).fire()
	again := h.expectTimer(100 * time.Millisecond)
	if n := len(h.imex.calls); n != 0 {
		t.Fatalf("%d IMEX calls before the view synced, want none", n)
	}
	again.fire()
	h.expectCalls("Start")
}

func TestSupervisorStopsIMEXWhenItsContextEnds(t *testing.T) {
	cases := map[string]struct {
		started   bool
		stopErr   error
		wantCalls []string
		wantErr   string
	}{
		"running: stopped":               {started: true, wantCalls: []string{"Stop"}},
		"running, stop fails: the error": {started: true, stopErr: errors.New("still there"), wantCalls: []string{"Stop"}, wantErr: "stopping IMEX: still there"},
		"never started: nothing to stop": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := start(t, setup{dnsNames: true}, peer(2))
			if tc.started {
				h.view.set(peer(1), peer(2))
				h.firstStart()
			}
			h.imex.failStop(tc.stopErr)
			err := h.stop()
			if (err == nil) != (tc.wantErr == "") || (err != nil && err.Error() != tc.wantErr) {
				t.Errorf("the loop returned %v, want %q", err, tc.wantErr)
			}
			var got []string
			for len(h.imex.calls) > 0 {
				got = append(got, <-h.imex.calls)
			}
			if diff := cmp.Diff(tc.wantCalls, got); diff != "" {
				t.Errorf("IMEX calls after the context ended (-want +got):\n%s", diff)
			}
		})
	}
}

// LabelPod is one merge patch of the pod's labels: nothing in it depends on resourceVersion or
// server-side apply, so the fake client shows what it writes.
func TestLabelPod(t *testing.T) {
	cases := map[string]struct {
		cliqueID string
		want     map[string]string
	}{
		"clique":                 {cliqueID: "uuid.1", want: map[string]string{"app": "daemon", cdv1beta1.CliqueIDLabel: "uuid.1"}},
		"no fabric: empty value": {cliqueID: "", want: map[string]string{"app": "daemon", cdv1beta1.CliqueIDLabel: ""}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := testutil.MakePod("daemon-x", "driver").Label("app", "daemon").Label(cdv1beta1.CliqueIDLabel, "stale").NodeName("n1").Obj()
			c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(pod).Build()
			cfg := Config{PodNamespace: "driver", PodName: "daemon-x", CliqueID: tc.cliqueID}
			if err := LabelPod(context.Background(), c, cfg); err != nil {
				t.Fatal(err)
			}
			got := &corev1.Pod{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			if got.Spec.NodeName != "n1" {
				t.Errorf("the patch changed more than labels: %+v", got.Spec)
			}
		})
	}
}

// A pod that cannot be labelled ends in an error naming it, once the context ends.
func TestLabelPodGivesUp(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := LabelPod(ctx, c, Config{PodNamespace: "driver", PodName: "gone", CliqueID: "uuid.1"})
	if err == nil || !strings.Contains(err.Error(), "labelling pod driver/gone") || !strings.Contains(err.Error(), "not found") {
		t.Errorf("error %v, want one naming the pod and saying it was not found", err)
	}
}

// IMEX fixes its own node id when it starts: a new index for this node restarts IMEX, in
// DNS-names mode too, where it would otherwise be only a hosts-file change and a reload.
func TestSupervisorRestartsWhenItsOwnIndexChanges(t *testing.T) {
	h := start(t, setup{dnsNames: true}, peer(1), peer(2))
	h.firstStart()
	moved := peer(1)
	moved.Index = 5
	h.view.set(moved, peer(2))
	h.poke()
	h.expectCalls("Stop", "Start")
	h.expectNoCalls()
	// The new run has the new index: a peer joining now is a reload again.
	h.view.set(moved, peer(2), peer(3))
	h.poke()
	h.expectCalls("Reload")
	h.expectNoCalls()
}

// A reload is not sent before the run has been Ready once (IMEX installs its SIGUSR1 handler
// only after its start-up checks); it is held back, looked at again every second, and sent
// once IMEX is Ready.
func TestSupervisorHoldsReloadsUntilReady(t *testing.T) {
	h := start(t, setup{dnsNames: true}, peer(1), peer(2))
	h.imex.setReady(false)
	h.firstStart()
	h.view.set(peer(1), peer(2), peer(3))
	h.poke()
	recheck := h.expectTimer(time.Second)
	h.expectNoCalls()
	recheck.fire()
	recheck = h.expectTimer(time.Second) // still not Ready
	h.expectNoCalls()
	h.imex.setReady(true)
	recheck.fire()
	h.expectCalls("Reload")
	h.expectNoCalls()
	// Ready once is enough: the next change, after the reload interval, reloads at once.
	h.imex.setReady(false)
	h.advance(reloadInterval)
	h.view.set(peer(1), peer(2))
	h.poke()
	h.expectCalls("Reload")
}

// IMEX honours SIGUSR1 at most once every 5 s: changes within the interval after a reload are
// coalesced into one reload when it is over, none lost.
func TestSupervisorSpacesReloads(t *testing.T) {
	h := start(t, setup{dnsNames: true}, peer(1), peer(2))
	h.firstStart()
	h.view.set(peer(1), peer(2), peer(3))
	h.poke()
	h.expectCalls("Reload")
	h.advance(2 * time.Second)
	h.view.set(peer(1), peer(2), peer(3), peer(4))
	h.poke()
	later := h.expectTimer(reloadInterval - 2*time.Second)
	h.view.set(peer(1), peer(2), peer(3), peer(4), peer(5))
	h.poke()
	h.expectNoCalls() // one timer, no reload yet
	h.advance(reloadInterval - 2*time.Second)
	later.fire()
	h.expectCalls("Reload")
	h.expectNoCalls()
	hosts, err := os.ReadFile(h.cfg.HostsPath)
	if err != nil || !strings.Contains(string(hosts), "127.0.0.5\t"+imexName(4)) {
		t.Errorf("hosts file at the coalesced reload: %q, %v; want the last peer in it", hosts, err)
	}
}

// Only a run that turned Ready resets the backoff: one that exits without ever being Ready
// keeps doubling it.
func TestSupervisorBackoffResetsOnlyAfterAReadyRun(t *testing.T) {
	h := start(t, setup{dnsNames: true}, peer(1))
	h.imex.setReady(false)
	h.firstStart()
	h.imex.end(errors.New("exited"))
	h.expectTimer(time.Second).fire()
	h.expectCalls("Start")
	h.settle() // passes while not Ready
	h.imex.end(errors.New("exited"))
	h.expectTimer(2 * time.Second).fire()
	h.expectCalls("Start")
	h.imex.setReady(true)
	h.settle()
	h.imex.end(errors.New("exited"))
	h.expectTimer(time.Second)
}

// Another IMEX holds the node's IMEX session: IMEX fails with NV_ERR_IN_USE, at start or when
// it exits. Most often that is the previous domain's IMEX still shutting down, so the supervisor
// starts IMEX again with its backoff; once the session stays held past the retry window it
// reports it once and stops trying, however membership changes.
func TestSupervisorRetriesThenReportsASessionInUse(t *testing.T) {
	inUse := &imex.ExitError{Binary: "nvidia-imex", Code: 1, Stderr: "IMEX session: NV_ERR_IN_USE"}
	for name, failAtStart := range map[string]bool{"the run ends": false, "the start fails": true} {
		t.Run(name, func(t *testing.T) {
			h := start(t, setup{dnsNames: true}, peer(1), peer(2))
			if failAtStart {
				h.imex.failNextStart(fmt.Errorf("starting: %w", inUse))
				h.expectTimer(50 * time.Millisecond).fire()
				h.expectCalls("Start")
			} else {
				h.firstStart()
				h.imex.end(inUse)
			}
			// Retried with the usual backoff while the window lasts.
			for _, d := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
				tm := h.expectTimer(d)
				h.advance(d)
				h.imex.failNextStart(fmt.Errorf("starting: %w", inUse))
				tm.fire()
				h.expectCalls("Start")
			}
			select {
			case r := <-h.reports:
				t.Fatalf("reported %q within the retry window", r)
			default:
			}
			// Past the window: reported once, never started again.
			tm := h.expectTimer(8 * time.Second)
			h.advance(DefaultSessionInUseRetry)
			h.imex.failNextStart(fmt.Errorf("starting: %w", inUse))
			tm.fire()
			h.expectCalls("Start")
			select {
			case reason := <-h.reports:
				if reason != cdv1beta1.IMEXBlockedHostIMEXInUse {
					t.Errorf("reported %q, want %q", reason, cdv1beta1.IMEXBlockedHostIMEXInUse)
				}
			case <-time.After(waitLimit):
				t.Fatalf("nothing reported within %s", waitLimit)
			}
			h.view.set(peer(1), peer(2), peer(3))
			h.poke()
			h.settle()
			h.expectNoCalls()
			select {
			case tm := <-h.timers:
				t.Fatalf("the supervisor set a timer of %s: want no restart", tm.d)
			case r := <-h.reports:
				t.Fatalf("reported again (%q): want once", r)
			default:
			}
		})
	}
}

// The previous domain's IMEX releases the session within the window: the next start runs, and
// nothing is reported.
func TestSupervisorStartsOnceTheSessionIsReleased(t *testing.T) {
	inUse := &imex.ExitError{Binary: "nvidia-imex", Code: 1, Stderr: "IMEX session: NV_ERR_IN_USE"}
	h := start(t, setup{dnsNames: true}, peer(1), peer(2))
	h.imex.failNextStart(fmt.Errorf("starting: %w", inUse))
	h.expectTimer(50 * time.Millisecond).fire()
	h.expectCalls("Start")
	tm := h.expectTimer(time.Second)
	h.advance(time.Second)
	tm.fire()
	h.expectCalls("Start")
	select {
	case r := <-h.reports:
		t.Fatalf("reported %q although the session was released", r)
	default:
	}
}

// With a host nvidia-imex service enabled on the node (the plugin found its unit link), the
// service is the holder: reported at the first NV_ERR_IN_USE, no retry.
func TestSupervisorReportsAHostServiceAtOnce(t *testing.T) {
	inUse := &imex.ExitError{Binary: "nvidia-imex", Code: 1, Stderr: "IMEX session: NV_ERR_IN_USE"}
	h := start(t, setup{dnsNames: true, hostIMEXService: "/etc/systemd/system/multi-user.target.wants/nvidia-imex.service"}, peer(1), peer(2))
	h.imex.failNextStart(fmt.Errorf("starting: %w", inUse))
	h.expectTimer(50 * time.Millisecond).fire()
	h.expectCalls("Start")
	select {
	case reason := <-h.reports:
		if reason != cdv1beta1.IMEXBlockedHostIMEXInUse {
			t.Errorf("reported %q", reason)
		}
	case <-time.After(waitLimit):
		t.Fatalf("nothing reported within %s", waitLimit)
	}
	h.settle()
	select {
	case tm := <-h.timers:
		t.Fatalf("the supervisor set a timer of %s: want no retry", tm.d)
	default:
	}
}

func TestSessionHeldMessage(t *testing.T) {
	host := sessionHeldMessage("/etc/systemd/system/multi-user.target.wants/nvidia-imex.service", time.Minute)
	for _, w := range []string{"host nvidia-imex service is enabled", "multi-user.target.wants/nvidia-imex.service", "systemctl disable --now nvidia-imex"} {
		if !strings.Contains(host, w) {
			t.Errorf("host service message %q lacks %q", host, w)
		}
	}
	held := sessionHeldMessage("", 2*time.Minute)
	for _, w := range []string{"still held by another IMEX", "NV_ERR_IN_USE", "after 2m0s", "no host nvidia-imex service was found"} {
		if !strings.Contains(held, w) {
			t.Errorf("held message %q lacks %q", held, w)
		}
	}
}

func TestCheckReportsBlockedIMEX(t *testing.T) {
	cfg := Config{CliqueID: "c.1", ConfigDir: t.TempDir()}
	x := newFakeIMEX()
	x.setReady(true)
	if err := Check(context.Background(), cfg, x); err != nil {
		t.Fatalf("Check with IMEX ready: %v", err)
	}
	if err := os.WriteFile(cfg.BlockedPath(), []byte("HostIMEXInUse: a host service holds the session\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := Check(context.Background(), cfg, x)
	if err == nil || !strings.Contains(err.Error(), "IMEX cannot run on this node: HostIMEXInUse: a host service holds the session") {
		t.Fatalf("Check = %v, want the recorded reason", err)
	}
}

func TestUseDNSNames(t *testing.T) {
	cases := map[string]struct {
		gate     bool
		version  string
		want     bool
		wantNote string
		wantErr  string
	}{
		"gate off":                      {gate: false, version: "580.82.07", want: false},
		"version not known":             {gate: true, want: true},
		"current driver":                {gate: true, version: "580.82.07", want: true},
		"the first driver with names":   {gate: true, version: "570.158.01", want: true},
		"older driver: refused":         {gate: true, version: "570.148.08", wantErr: "needs NVIDIA driver 570.158.01 or later (IMEX takes host names in its node list from that version), but this node runs 570.148.08"},
		"unparsable version: names":     {gate: true, version: "r580", want: true, wantNote: "cannot tell"},
		"gate off wins over old driver": {gate: false, version: "550.1.1", want: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, note, err := useDNSNames(tc.gate, tc.version)
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("useDNSNames(%v, %q) error %v, want %q", tc.gate, tc.version, err, tc.wantErr)
			}
			if err == nil && (got != tc.want || (tc.wantNote == "") != (note == "") || !strings.Contains(note, tc.wantNote)) {
				t.Errorf("useDNSNames(%v, %q) = %v, %q; want %v and a note with %q", tc.gate, tc.version, got, note, tc.want, tc.wantNote)
			}
		})
	}
}

// With addresses in nodes.cfg (IMEXDaemonsWithDNSNames off) every later join restarts IMEX, so
// the first start waits until the domain lists numNodes nodes, as NVIDIA's daemon does; with
// names it starts at once.
func TestSupervisorWaitsForTheDomainWithAddresses(t *testing.T) {
	for name, dnsNames := range map[string]bool{"addresses": false, "names": true} {
		t.Run(name, func(t *testing.T) {
			h := start(t, setup{dnsNames: dnsNames}, peer(1), peer(2))
			h.view.mu.Lock()
			h.view.numNodes = 3
			h.view.mu.Unlock()
			h.expectTimer(50 * time.Millisecond).fire()
			if dnsNames {
				h.expectCalls("Start")
				return
			}
			h.expectNoCalls()
			h.view.set(peer(1), peer(2), peer(3))
			h.poke()
			h.expectCalls("Start")
		})
	}
}

// apiWrite is one write a client sent: its verb and the object it wrote.
type apiWrite struct {
	Verb, Kind, Namespace, Name string
}

// writeLog records every write (create, update, patch, apply, delete, on an object or a
// subresource) sent through a client made by recordingClient.
type writeLog struct {
	mu     sync.Mutex
	writes []apiWrite
}

func (l *writeLog) add(c client.Client, verb string, obj client.Object) {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	if kind == "" {
		if gvk, err := c.GroupVersionKindFor(obj); err == nil {
			kind = gvk.Kind
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes = append(l.writes, apiWrite{Verb: verb, Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName()})
}

func (l *writeLog) list() []apiWrite {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.writes)
}

// recordingClient is a fake client holding objs that records the writes sent through it and
// passes them on; raw is the same fake without the recording, for the test's own writes. Server-side apply is recorded as a write and refused: the daemon never
// applies. A watch that asks for its initial state as events (client-go's watch-list) is
// refused, as by an apiserver without the feature, and the watcher lists instead: the fake
// client does not send the bookmark that ends the initial events.
func recordingClient(objs ...client.Object) (recorded, raw client.WithWatch, _ *writeLog) {
	l := &writeLog{}
	refuseApply := errors.New("the daemon does not use server-side apply")
	raw = fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).Build()
	recorded = interceptor.NewClient(raw, interceptor.Funcs{
		Watch: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
			lo := &client.ListOptions{}
			lo.ApplyOptions(opts)
			if lo.Raw != nil && lo.Raw.SendInitialEvents != nil && *lo.Raw.SendInitialEvents {
				return nil, errors.New("the fake client sends no initial events")
			}
			return c.Watch(ctx, list, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			l.add(c, "create", obj)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			l.add(c, "update", obj)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			l.add(c, "patch", obj)
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			l.add(c, "delete", obj)
			return c.Delete(ctx, obj, opts...)
		},
		DeleteAllOf: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			l.add(c, "deletecollection", obj)
			return c.DeleteAllOf(ctx, obj, opts...)
		},
		Apply: func(context.Context, client.WithWatch, runtime.ApplyConfiguration, ...client.ApplyOption) error {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.writes = append(l.writes, apiWrite{Verb: "apply"})
			return refuseApply
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			l.add(c, "create/"+sub, obj)
			return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			l.add(c, "update/"+sub, obj)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			l.add(c, "patch/"+sub, obj)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
		SubResourceApply: func(_ context.Context, _ client.Client, sub string, _ runtime.ApplyConfiguration, _ ...client.SubResourceApplyOption) error {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.writes = append(l.writes, apiWrite{Verb: "apply/" + sub})
			return refuseApply
		},
	})
	return recorded, raw, l
}

// messages is a logger that sends every message it logs (info or error) to a channel.
func messages(t *testing.T) (logr.Logger, <-chan string) {
	ch := make(chan string, 256)
	log := funcr.New(func(_, args string) {
		t.Log(args)
		select {
		case ch <- args:
		default:
		}
	}, funcr.Options{Verbosity: 1})
	return log, ch
}

// waitForMessage waits until the log has a message containing s.
func waitForMessage(t *testing.T, ch <-chan string, s string) {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case m := <-ch:
			if strings.Contains(m, s) {
				return
			}
		case <-deadline:
			t.Fatalf("no log message containing %q within %s", s, waitLimit)
		}
	}
}

// TestServeWritesItsPodOnce: a daemon's one API write in a healthy run is the label on its own
// pod (the headline "one API write per daemon"), on a node with a fabric, where it labels its
// pod, watches its clique, runs IMEX until its context ends and stops it, and on a node
// without one, where it labels its pod and idles. Every write Serve sends, of any verb and to
// any object, is counted: a second patch of the pod, an event, or a write to the clique or the
// domain fails the test.
func TestServeWritesItsPodOnce(t *testing.T) {
	const ns, podName, node = "driver", "daemon-x", "n1"
	cases := map[string]struct {
		cliqueID string
		// until is what Serve logs once it has done what the case waits for.
		until string
		// join, when set, adds a node to the clique once until is logged, and Serve logs it
		// (joined) once it acted on the change.
		join, joined string
		// wantIMEX are the calls to IMEX by the time Serve returned.
		wantIMEX []string
	}{
		"a fabric: IMEX runs, then stops": {cliqueID: "c.1", until: "Started IMEX", wantIMEX: []string{"Start", "Stop"}},
		"a fabric: a node joins, IMEX reloads": {cliqueID: "c.1", until: "Started IMEX",
			join: "n3", joined: "reloading IMEX", wantIMEX: []string{"Start", "Reload", "Stop"}},
		"no fabric: it idles": {cliqueID: "", until: "idling"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := Config{
				NodeName: node, PodIP: "127.0.0.1", PodName: podName, PodNamespace: ns, PodUID: "pod-uid",
				CliqueID: tc.cliqueID, CDUID: testUID, CDName: "cd", CDNamespace: "user", MaxNodes: 18, DNSNames: true,
				ConfigDir: dir, HostsPath: filepath.Join(dir, "hosts"),
			}
			pod := testutil.MakePod(podName, ns).Label("app", "daemon").NodeName(node).Obj()
			objs := []client.Object{pod}
			if tc.cliqueID != "" {
				objs = append(objs, testutil.MakeClique(cfg.CliqueObjectName(), ns).
					Daemon(node, cfg.PodIP, tc.cliqueID, 0, cdv1beta1.StatusReady).
					Daemon("n2", "127.0.0.2", tc.cliqueID, 1, cdv1beta1.StatusReady).Obj())
			}
			c, raw, writes := recordingClient(objs...)
			x := newFakeIMEX()
			x.setReady(true)
			log, logged := messages(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- Serve(ctx, cfg, Deps{Client: c, IMEX: x, Log: log}) }()

			waitForMessage(t, logged, tc.until)
			if tc.join != "" {
				clique := &cdv1beta1.ComputeDomainClique{}
				if err := raw.Get(ctx, client.ObjectKey{Namespace: ns, Name: cfg.CliqueObjectName()}, clique); err != nil {
					t.Fatal(err)
				}
				clique.Daemons = append(clique.Daemons, cdv1beta1.ComputeDomainDaemonInfo{
					NodeName: tc.join, IPAddress: "127.0.0.3", CliqueID: tc.cliqueID, Index: 2, Status: cdv1beta1.StatusReady})
				if err := raw.Update(ctx, clique); err != nil {
					t.Fatal(err)
				}
				waitForMessage(t, logged, tc.joined)
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Serve: %v", err)
				}
			case <-time.After(waitLimit):
				t.Fatalf("Serve did not return within %s of its context ending", waitLimit)
			}

			var calls []string
			for len(x.calls) > 0 {
				calls = append(calls, <-x.calls)
			}
			if diff := cmp.Diff(tc.wantIMEX, calls); diff != "" {
				t.Errorf("IMEX calls (-want +got):\n%s", diff)
			}
			want := []apiWrite{{Verb: "patch", Kind: "Pod", Namespace: ns, Name: podName}}
			if diff := cmp.Diff(want, writes.list()); diff != "" {
				t.Errorf("API writes of Serve (-want +got):\n%s", diff)
			}
			got := &corev1.Pod{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), got); err != nil {
				t.Fatal(err)
			}
			if v, ok := got.Labels[cdv1beta1.CliqueIDLabel]; !ok || v != tc.cliqueID {
				t.Errorf("pod labels %v, want %s=%q", got.Labels, cdv1beta1.CliqueIDLabel, tc.cliqueID)
			}
		})
	}
}
