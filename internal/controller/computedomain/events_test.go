package computedomain

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/membership"
	"cdplane/internal/testutil"
)

// fakeEventClock is a clock whose timers run, in order, when the test advances it.
type fakeEventClock struct {
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at   time.Time
	f    func()
	done bool
}

func (c *fakeEventClock) Now() time.Time { return c.now }

func (c *fakeEventClock) AfterFunc(d time.Duration, f func()) func() bool {
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		was := !t.done
		t.done = true
		return was
	}
}

// advance moves the clock by d, running each timer due on the way at its own time.
func (c *fakeEventClock) advance(d time.Duration) {
	target := c.now.Add(d)
	for fired := 0; ; fired++ {
		if fired > 10000 {
			panic("timers keep rescheduling themselves at the same time")
		}
		var due *fakeTimer
		for _, t := range c.timers {
			if !t.done && !t.at.After(target) && (due == nil || t.at.Before(due.at)) {
				due = t
			}
		}
		if due == nil {
			c.now = target
			return
		}
		due.done = true
		if due.at.After(c.now) {
			c.now = due.at
		}
		due.f()
	}
}

func (c *fakeEventClock) pendingTimers() int {
	n := 0
	for _, t := range c.timers {
		if !t.done {
			n++
		}
	}
	return n
}

type recorded struct {
	Type, Reason, Action, Note, ResourceVersion string
}

type fakeEventRecorder struct{ events []recorded }

func (f *fakeEventRecorder) Eventf(regarding, _ runtime.Object, eventtype, reason, action, note string, args ...any) {
	ref := regarding.(*corev1.ObjectReference)
	f.events = append(f.events, recorded{eventtype, reason, action, fmt.Sprintf(note, args...), ref.ResourceVersion})
}

// eventsDomain plays reconciles of one domain: its members and blocked nodes as the test sets
// them, aggregated by membership.Aggregate, written (cd.Status, a new resourceVersion).
type eventsDomain struct {
	t       *testing.T
	clk     *fakeEventClock
	rec     *fakeEventRecorder
	e       *Events
	cd      *cdv1beta1.ComputeDomain
	rv      int
	members map[string]bool
	blocked map[string]string
	seen    int
}

func newEventsDomain(t *testing.T, numNodes int) *eventsDomain {
	clk := &fakeEventClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	rec := &fakeEventRecorder{}
	cd := testutil.MakeComputeDomain("cd").Namespace("team").UID(testUID).NumNodes(numNodes).Obj()
	cd.ResourceVersion = "1"
	return &eventsDomain{
		t: t, clk: clk, rec: rec, e: newEvents(rec, EventLimits{}, clk), cd: cd, rv: 1,
		members: map[string]bool{}, blocked: map[string]string{},
	}
}

func (d *eventsDomain) result() membership.Result {
	res := membership.Result{Cliques: map[string][]membership.Entry{}}
	for n, ready := range d.members {
		status := cdv1beta1.StatusNotReady
		if ready {
			status = cdv1beta1.StatusReady
		}
		res.Cliques["c"] = append(res.Cliques["c"], membership.Entry{NodeName: n, CliqueID: "c", Status: status})
	}
	for n, why := range d.blocked {
		res.Blocked = append(res.Blocked, membership.Blocked{Node: n, Reason: why})
	}
	slices.SortFunc(res.Blocked, func(a, b membership.Blocked) int { return strings.Compare(a.Node, b.Node) })
	return res
}

// pass is one reconcile that wrote its status: the events posted since the last pass.
func (d *eventsDomain) pass() []recorded {
	res := d.result()
	st := membership.Aggregate(res, d.cd.Spec.NumNodes, 1, d.cd.Status.Conditions)
	d.e.Observe(context.Background(), d.cd, res, st)
	d.cd = d.cd.DeepCopy()
	d.cd.Status = st
	d.rv++
	d.cd.ResourceVersion = strconv.Itoa(d.rv)
	return d.posted()
}

// posted returns the events posted since the last call.
func (d *eventsDomain) posted() []recorded {
	out := d.rec.events[d.seen:]
	d.seen = len(d.rec.events)
	return out
}

func (d *eventsDomain) join(ready bool, nodes ...string) {
	for _, n := range nodes {
		d.members[n] = ready
	}
}

func nodeNames(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s%04d", prefix, i))
	}
	return out
}

func reasons(evs []recorded) []string {
	out := []string{}
	for _, ev := range evs {
		out = append(out, ev.Type+"/"+ev.Reason)
	}
	return out
}

func TestDiff(t *testing.T) {
	snap := func(status string, members map[string]bool, blocked map[string]string) snapshot {
		if members == nil {
			members = map[string]bool{}
		}
		if blocked == nil {
			blocked = map[string]string{}
		}
		return snapshot{members: members, blocked: blocked, status: status}
	}
	cases := map[string]struct {
		prev, next snapshot
		want       changes
	}{
		"nothing changed": {
			prev: snap(cdv1beta1.StatusReady, map[string]bool{"a": true}, nil),
			next: snap(cdv1beta1.StatusReady, map[string]bool{"a": true}, nil),
		},
		"joins and leaves, sorted; readiness of a member is no join": {
			prev: snap(cdv1beta1.StatusNotReady, map[string]bool{"a": false, "b": true}, nil),
			next: snap(cdv1beta1.StatusNotReady, map[string]bool{"a": true, "d": false, "c": false}, nil),
			want: changes{joined: []string{"c", "d"}, left: []string{"b"}},
		},
		"first report NotReady is no transition": {
			prev: snap("", nil, nil),
			next: snap(cdv1beta1.StatusNotReady, nil, nil),
		},
		"first report Ready is one": {
			prev: snap("", nil, nil),
			next: snap(cdv1beta1.StatusReady, nil, nil),
			want: changes{readiness: true},
		},
		"NotReady to Ready": {
			prev: snap(cdv1beta1.StatusNotReady, nil, nil),
			next: snap(cdv1beta1.StatusReady, nil, nil),
			want: changes{readiness: true},
		},
		"Ready to NotReady": {
			prev: snap(cdv1beta1.StatusReady, nil, nil),
			next: snap(cdv1beta1.StatusNotReady, nil, nil),
			want: changes{readiness: true},
		},
		"blocked set grows; a changed reason or a node unblocked is no new block": {
			prev: snap("", nil, map[string]string{"a": "HostIMEXInUse", "b": "FabricError"}),
			next: snap("", nil, map[string]string{"a": "FabricError", "z": "HostIMEXInUse", "c": "X"}),
			want: changes{blocked: []string{"c", "z"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, diff(tc.prev, tc.next), cmp.AllowUnexported(changes{})); d != "" {
				t.Errorf("diff (-want +got):\n%s", d)
			}
		})
	}
}

func TestSeedSnapshot(t *testing.T) {
	next := snapshot{members: map[string]bool{"a": true, "b": true, "c": true}, blocked: map[string]string{"b": "HostIMEXInUse"}, numNodes: 3}
	blockedTrue := metav1.Condition{Type: cdv1beta1.ConditionNodesBlocked, Status: metav1.ConditionTrue, Reason: "HostIMEXInUse"}
	blockedFalse := metav1.Condition{Type: cdv1beta1.ConditionNodesBlocked, Status: metav1.ConditionFalse, Reason: "NoneBlocked"}
	cases := map[string]struct {
		status      cdv1beta1.ComputeDomainStatus
		wantMembers map[string]bool
		wantBlocked map[string]string
	}{
		"a new domain: nothing before": {
			wantMembers: map[string]bool{}, wantBlocked: map[string]string{},
		},
		"status.nodes lists every member": {
			status: cdv1beta1.ComputeDomainStatus{Status: cdv1beta1.StatusNotReady, TotalNodes: 2, Nodes: []cdv1beta1.ComputeDomainNode{
				{Name: "a", Status: cdv1beta1.StatusReady}, {Name: "x", Status: cdv1beta1.StatusNotReady},
			}, Conditions: []metav1.Condition{blockedFalse}},
			wantMembers: map[string]bool{"a": true, "x": false}, wantBlocked: map[string]string{},
		},
		"status.nodes lists only some (cliques hold the rest): now stands for before": {
			status: cdv1beta1.ComputeDomainStatus{Status: cdv1beta1.StatusReady, TotalNodes: 3, Nodes: []cdv1beta1.ComputeDomainNode{
				{Name: "a", Status: cdv1beta1.StatusReady},
			}, Conditions: []metav1.Condition{blockedTrue}},
			wantMembers: next.members, wantBlocked: next.blocked,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cd := testutil.MakeComputeDomain("cd").Namespace("team").NumNodes(3).Obj()
			cd.Status = tc.status
			got := seedSnapshot(cd, next)
			if d := cmp.Diff(tc.wantMembers, got.members); d != "" {
				t.Errorf("members (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantBlocked, got.blocked); d != "" {
				t.Errorf("blocked (-want +got):\n%s", d)
			}
			if got.status != tc.status.Status {
				t.Errorf("status %q, want %q", got.status, tc.status.Status)
			}
		})
	}
}

func TestBucket(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := newBucket(3, 30*time.Second, t0)
	for i := range 3 {
		if !b.take(t0) {
			t.Fatalf("take %d of the burst refused", i+1)
		}
	}
	if b.take(t0) {
		t.Error("a fourth take at once allowed")
	}
	if w := b.wait(t0); w != 30*time.Second {
		t.Errorf("wait %v, want 30s", w)
	}
	if w := b.wait(t0.Add(10 * time.Second)); w != 20*time.Second {
		t.Errorf("wait after 10s %v, want 20s", w)
	}
	if !b.take(t0.Add(30 * time.Second)) {
		t.Error("no token after one interval")
	}
	if b.take(t0.Add(30 * time.Second)) {
		t.Error("two tokens after one interval")
	}
	// A long quiet time refills the burst, no more.
	later := t0.Add(time.Hour)
	n := 0
	for b.take(later) {
		n++
	}
	if n != 3 {
		t.Errorf("%d tokens after an hour, want the burst (3)", n)
	}
}

func TestEventsOfADomainsLife(t *testing.T) {
	d := newEventsDomain(t, 3)
	if got := d.pass(); len(got) != 0 {
		t.Fatalf("a new domain without nodes: %+v, want no event", got)
	}
	d.join(false, "n1", "n2", "n3")
	steps := []struct {
		what string
		do   func()
		want []recorded
	}{
		{
			what: "three nodes join, not Ready yet",
			want: []recorded{{Type: "Normal", Reason: EventNodesJoined, Action: eventActionMembership, Note: "3 nodes joined (n1, n2, n3); 3 of 3 joined, 0 Ready"}},
		},
		{
			what: "they turn Ready: the domain is Ready",
			do:   func() { d.join(true, "n1", "n2", "n3") },
			want: []recorded{{Type: "Normal", Reason: EventDomainReady, Action: eventActionStatus, Note: "ComputeDomain is Ready: all 3 nodes are ready"}},
		},
		{
			what: "one leaves: the domain waits for a node",
			do:   func() { delete(d.members, "n3") },
			want: []recorded{
				{Type: "Normal", Reason: EventNodesLeft, Action: eventActionMembership, Note: "1 node left (n3); 2 of 3 joined, 2 Ready"},
				{Type: "Warning", Reason: EventDomainNotReady, Action: eventActionStatus,
					Note: "ComputeDomain is NotReady: WaitingForNodes: 2 of 3 nodes have joined; waiting for the workload's pods to land on 1 more"},
			},
		},
		{
			what: "it comes back, blocked: a host IMEX holds its session",
			do: func() {
				d.join(false, "n3")
				d.blocked["n3"] = cdv1beta1.IMEXBlockedHostIMEXInUse
			},
			want: []recorded{
				{Type: "Normal", Reason: EventNodesJoined, Action: eventActionMembership, Note: "1 node joined (n3); 3 of 3 joined, 2 Ready"},
				{Type: "Warning", Reason: EventNodesBlocked, Action: eventActionStatus, Note: "1 node blocked (n3: HostIMEXInUse); " +
					"IMEX cannot run on 1 node of the domain and their daemons do not retry. HostIMEXInUse: a host nvidia-imex service holds the node's IMEX session; " +
					"stop and disable it (systemctl disable --now nvidia-imex) and delete the node's daemon pod, or run the plane with imex.mode=hostManaged"},
			},
		},
		{
			what: "nothing changes: no event",
		},
	}
	for _, s := range steps {
		if s.do != nil {
			s.do()
		}
		got := d.pass()
		for i := range got {
			got[i].ResourceVersion = ""
		}
		if d := cmp.Diff(s.want, got, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("%s: events (-want +got):\n%s", s.what, d)
		}
	}
}

func TestEventsNameFiveNodesAndCountTheRest(t *testing.T) {
	d := newEventsDomain(t, 2304)
	d.join(true, nodeNames("r", 0, 57)...)
	got := d.pass()
	want := "57 nodes joined (r0000, r0001, r0002, r0003, r0004 and 52 more); 57 of 2304 joined, 57 Ready"
	if len(got) != 1 || got[0].Note != want {
		t.Errorf("events %+v, want one with note %q", got, want)
	}
}

// TestEventsRateLimitFoldsHeldEvents: ten reconciles in a row, each with ten joins: three events
// at once (the burst), the other seven reconciles' joins are held and folded into one event when
// the next token comes, 30 s later. Nothing is lost: the counts add up.
func TestEventsRateLimitFoldsHeldEvents(t *testing.T) {
	d := newEventsDomain(t, 100)
	var got []recorded
	for i := range 10 {
		d.join(false, nodeNames("n", i*10, i*10+10)...)
		got = append(got, d.pass()...)
		d.clk.advance(200 * time.Millisecond)
	}
	if len(got) != 3 {
		t.Fatalf("%d events during the burst, want 3: %+v", len(got), got)
	}
	if got[2].Note != "10 nodes joined (n0020, n0021, n0022, n0023, n0024 and 5 more); 30 of 100 joined, 0 Ready" {
		t.Errorf("third event: %q", got[2].Note)
	}
	d.clk.advance(28 * time.Second)
	if late := d.posted(); len(late) != 1 {
		t.Fatalf("after 30 s: %+v, want the held joins in one event", late)
	} else if want := "10 nodes joined (n0090, n0091, n0092, n0093, n0094 and 5 more), and 60 more joined since the last event; 100 of 100 joined, 0 Ready"; late[0].Note != want {
		t.Errorf("folded event %q, want %q", late[0].Note, want)
	}
	if n := d.clk.pendingTimers(); n != 0 {
		t.Errorf("%d timers left with nothing held", n)
	}
	d.clk.advance(time.Hour)
	if late := d.posted(); len(late) != 0 {
		t.Errorf("events after everything was posted: %+v", late)
	}
}

// TestEventsReadinessIsNeverDropped: a domain flapping between Ready and NotReady gets its first
// four transitions at once; the rest are held, never dropped: one event a minute says what the
// domain is now and how often it changed, and what it was while NotReady.
func TestEventsReadinessIsNeverDropped(t *testing.T) {
	d := newEventsDomain(t, 2)
	d.join(false, "a", "b")
	d.pass() // joined, NotReady: no readiness event
	var got []recorded
	for i := range 9 {
		d.join(i%2 == 0, "b") // Ready, NotReady, Ready, ... ending Ready
		d.members["a"] = true
		got = append(got, d.pass()...)
		d.clk.advance(time.Second)
	}
	want := []string{"Normal/DomainReady", "Warning/DomainNotReady", "Normal/DomainReady", "Warning/DomainNotReady"}
	if d := cmp.Diff(want, reasons(got)); d != "" {
		t.Fatalf("events while flapping (-want +got):\n%s", d)
	}
	d.clk.advance(time.Minute)
	late := d.posted()
	if len(late) != 1 || late[0].Reason != EventDomainReady {
		t.Fatalf("after a minute: %+v, want one DomainReady", late)
	}
	for _, part := range []string{"ComputeDomain is Ready: all 2 nodes are ready", "its readiness changed 5 times since the last event",
		"it was NotReady in between: DaemonsNotReady: 1 of 2 daemons are not ready, on nodes: b"} {
		if !strings.Contains(late[0].Note, part) {
			t.Errorf("note %q lacks %q", late[0].Note, part)
		}
	}
}

// TestEventsHeldForAStaleResourceVersion: a reconcile that read the domain at the
// resourceVersion of the kind's last event (the cache had not seen the write yet) holds its
// event, which the next reconcile posts; if none comes, a timer does.
func TestEventsHeldForAStaleResourceVersion(t *testing.T) {
	d := newEventsDomain(t, 10)
	d.join(false, "a")
	if got := d.pass(); len(got) != 1 {
		t.Fatalf("first join: %+v", got)
	}
	d.rv-- // the next reconcile reads what the last one read
	d.cd.ResourceVersion = strconv.Itoa(d.rv)
	d.join(false, "b")
	if got := d.pass(); len(got) != 0 {
		t.Fatalf("a join read at the last event's resourceVersion: %+v, want it held", got)
	}
	got := d.pass()
	if len(got) != 1 || got[0].Note != "1 node joined (b); 2 of 10 joined, 0 Ready" || got[0].ResourceVersion == "1" {
		t.Errorf("next reconcile: %+v, want the held join at a newer resourceVersion", got)
	}

	d.rv--
	d.cd.ResourceVersion = strconv.Itoa(d.rv)
	d.join(false, "c")
	if got := d.pass(); len(got) != 0 {
		t.Fatalf("held again: %+v", got)
	}
	d.clk.advance(holdRetry)
	if got := d.posted(); len(got) != 1 || !strings.HasPrefix(got[0].Note, "1 node joined (c)") {
		t.Errorf("no reconcile came: %+v, want the timer to post the held join", got)
	}
}

func TestEventsForget(t *testing.T) {
	d := newEventsDomain(t, 100)
	for i := range 5 {
		d.join(false, nodeNames("n", i, i+1)...)
		d.pass()
	}
	if d.clk.pendingTimers() != 1 {
		t.Fatalf("%d timers, want one holding the joins", d.clk.pendingTimers())
	}
	d.e.Forget(d.cd.UID)
	d.clk.advance(time.Hour)
	if got := d.posted(); len(got) != 0 {
		t.Errorf("events of a forgotten domain: %+v", got)
	}
	// Seen again (a domain is forgotten only when deleted; here as after a restart): it starts
	// from its status, which lists its 5 nodes.
	d.join(false, "x")
	if got := d.pass(); len(got) != 1 || got[0].Note != "1 node joined (x); 6 of 100 joined, 0 Ready" {
		t.Errorf("after Forget: %+v, want only the new join", got)
	}
	var none *Events
	none.Observe(context.Background(), d.cd, membership.Result{}, cdv1beta1.ComputeDomainStatus{})
	none.Forget(d.cd.UID)
}

func TestEventsNoteFitsTheAPI(t *testing.T) {
	d := newEventsDomain(t, 10)
	for i := range 6 {
		d.join(false, strings.Repeat(string(rune('a'+i)), 240)+"-é")
	}
	got := d.pass()
	if len(got) != 1 {
		t.Fatalf("events %+v", got)
	}
	if n := len(got[0].Note); n > maxNoteBytes || !utf8.ValidString(got[0].Note) || !strings.HasSuffix(got[0].Note, "…") {
		t.Errorf("note of %d bytes (valid UTF-8: %v), want at most %d ending in …", n, utf8.ValidString(got[0].Note), maxNoteBytes)
	}
}

var joinedCount = regexp.MustCompile(`^(\d+) nodes? joined \(.*?\)(?:, and (\d+) more joined since the last event)?;`)

// joinedIn is the number of joins an event reports.
func joinedIn(note string) int {
	m := joinedCount.FindStringSubmatch(note)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	more, _ := strconv.Atoi(m[2])
	return n + more
}

// TestEventsOfA2304NodeRollout measures the events of a 2,304-node domain whose nodes join over
// two minutes (a few per reconcile, every 250 ms) and then turn Ready: bounded by the limits,
// not by the number of nodes or reconciles, and every join counted.
func TestEventsOfA2304NodeRollout(t *testing.T) {
	const n = 2304
	d := newEventsDomain(t, n)
	limits := DefaultEventLimits()
	start := d.clk.now
	names := nodeNames("r", 0, n)
	passes := 0
	var all []recorded
	for i := 0; i < n; i += 5 {
		d.join(false, names[i:min(i+5, n)]...)
		all = append(all, d.pass()...)
		passes++
		d.clk.advance(250 * time.Millisecond)
		all = append(all, d.posted()...)
	}
	d.join(true, names...)
	all = append(all, d.pass()...)
	passes++
	elapsed := d.clk.now.Sub(start)
	d.clk.advance(limits.Interval) // the last held joins
	all = append(all, d.posted()...)
	joins, joined, ready := 0, 0, 0
	for _, ev := range all {
		switch ev.Reason {
		case EventNodesJoined:
			joins++
			joined += joinedIn(ev.Note)
		case EventDomainReady:
			ready++
		}
	}
	t.Logf("%d nodes joined over %v in %d reconciles: %d events (%d NodesJoined, %d DomainReady)", n, elapsed.Round(time.Second), passes, len(all), joins, ready)
	if bound := limits.Burst + int((elapsed+limits.Interval)/limits.Interval); joins > bound {
		t.Errorf("%d NodesJoined events, want at most %d (burst %d + one per %v)", joins, bound, limits.Burst, limits.Interval)
	}
	if joined != n || ready != 1 || len(all) != joins+ready {
		t.Errorf("events report %d joins (want %d) and %d DomainReady (want 1); events: %v", joined, n, ready, reasons(all))
	}
}
