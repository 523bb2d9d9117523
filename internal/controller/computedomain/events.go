package computedomain

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/membership"
)

// Reasons of the events the controller posts regarding a ComputeDomain (events.k8s.io/v1).
const (
	// EventNodesJoined (Normal): nodes got an entry (membership: label, allocated claim, daemon).
	EventNodesJoined = "NodesJoined"
	// EventNodesLeft (Normal): nodes lost their entry.
	EventNodesLeft = "NodesLeft"
	// EventDomainReady (Normal): status.status turned Ready.
	EventDomainReady = "DomainReady"
	// EventDomainNotReady (Warning): status.status turned from Ready to NotReady; the note gives
	// the Ready condition's reason and message.
	EventDomainNotReady = "DomainNotReady"
	// EventNodesBlocked (Warning): the set of nodes where IMEX cannot run (condition
	// NodesBlocked) grew; the note names them and why.
	EventNodesBlocked = "NodesBlocked"

	// EventReportingController is the reportingController of the controller's events, named
	// like the daemon's (resource.nvidia.com/cdplane-daemon).
	EventReportingController = "resource.nvidia.com/cdplane-controller"

	// eventActionMembership and eventActionStatus are the events' actions (events.k8s.io
	// requires one): what the controller did when it saw the change.
	eventActionMembership = "UpdateMembership"
	eventActionStatus     = "UpdateStatus"

	// maxNamedNodes is how many nodes one event names; the rest are counted.
	maxNamedNodes = 5
	// maxNoteBytes is the events.k8s.io/v1 limit on an event's note.
	maxNoteBytes = 1024
	// holdRetry is when a held event (see Events.flushLocked) is tried again if no reconcile
	// comes first.
	holdRetry = 2 * time.Second
)

// EventLimits rate-limit a domain's events: one token bucket per domain and kind of event
// (joins, leaves, blocked nodes: Burst, one token per Interval; readiness, shared by
// DomainReady and DomainNotReady so that a flapping domain alternating the two is limited as
// one: ReadinessBurst, one token per ReadinessInterval). An event without a token is not
// dropped: its counts are folded into the kind's next event, which is posted as soon as a
// token is back (a timer, if no reconcile comes first).
type EventLimits struct {
	Burst             int
	Interval          time.Duration
	ReadinessBurst    int
	ReadinessInterval time.Duration
}

// DefaultEventLimits returns the limits the controller runs with: 3 events of each kind at
// once, then one per 30 s; readiness 4 at once (two full Ready/NotReady cycles), then one a
// minute. A 2,304-node domain joining over a few minutes gets its first three join events at
// once and then at most two a minute, each with the running totals; an hour of constant churn
// costs at most 123 events of a kind per domain (the apiserver keeps events for an hour by
// default).
func DefaultEventLimits() EventLimits {
	return EventLimits{Burst: 3, Interval: 30 * time.Second, ReadinessBurst: 4, ReadinessInterval: time.Minute}
}

// eventClock is the time and delayed execution the emitter needs; tests inject a fake.
type eventClock interface {
	Now() time.Time
	// AfterFunc runs f after d, in its own goroutine; the returned function stops it.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type realEventClock struct{}

func (realEventClock) Now() time.Time { return time.Now() }
func (realEventClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// Events derives a domain's events from what each reconcile wrote and posts them, aggregated
// (one event per reconcile and kind) and rate-limited (EventLimits). Its state is per domain UID,
// in memory: a restarted or failed-over controller starts from the domain's status and may
// repeat an event. A nil *Events posts nothing.
type Events struct {
	rec    events.EventRecorder
	limits EventLimits
	clock  eventClock

	mu      sync.Mutex
	domains map[types.UID]*domainEvents
}

// NewEvents returns an emitter posting through rec (an events.k8s.io/v1 recorder); zero limits
// take DefaultEventLimits.
func NewEvents(rec events.EventRecorder, limits EventLimits) *Events {
	return newEvents(rec, limits, realEventClock{})
}

func newEvents(rec events.EventRecorder, limits EventLimits, clk eventClock) *Events {
	def := DefaultEventLimits()
	if limits.Burst <= 0 || limits.Interval <= 0 {
		limits.Burst, limits.Interval = def.Burst, def.Interval
	}
	if limits.ReadinessBurst <= 0 || limits.ReadinessInterval <= 0 {
		limits.ReadinessBurst, limits.ReadinessInterval = def.ReadinessBurst, def.ReadinessInterval
	}
	return &Events{rec: rec, limits: limits, clock: clk, domains: map[types.UID]*domainEvents{}}
}

// snapshot is what a domain's events are derived from: its members, the blocked ones, and its
// status as written.
type snapshot struct {
	members    map[string]bool   // node -> its entry is Ready
	readyNodes int               // Ready members
	blocked    map[string]string // node -> why IMEX cannot run there
	status     string            // status.status; "" before the first report
	ready      metav1.Condition  // the Ready condition: why the domain is NotReady
	numNodes   int               // spec.numNodes
}

// snapshotOf is the snapshot of what a reconcile wrote: res's entries (all of them, in the
// cliques or status.nodes) and the status st.
func snapshotOf(res membership.Result, st cdv1beta1.ComputeDomainStatus, numNodes int) snapshot {
	s := snapshot{members: map[string]bool{}, blocked: map[string]string{}, status: st.Status, numNodes: numNodes}
	for _, e := range res.All() {
		s.members[e.NodeName] = e.Status == cdv1beta1.StatusReady
	}
	for _, b := range res.Blocked {
		s.blocked[b.Node] = b.Reason
	}
	if c := meta.FindStatusCondition(st.Conditions, cdv1beta1.ConditionReady); c != nil {
		s.ready = *c
	}
	s.count()
	return s
}

func (s *snapshot) count() {
	s.readyNodes = 0
	for _, ready := range s.members {
		if ready {
			s.readyNodes++
		}
	}
}

// seedSnapshot is what a domain had before, for a domain this controller has not seen since it
// started: its status as read. status.nodes names every member only when it lists totalNodes
// entries (with the cliques gate on, a large domain's status lists only fabric-less nodes);
// otherwise, and for the blocked nodes (the condition's message is for people), what is known
// now stands for what was, so that a restart posts no joins or blocks that happened before it.
func seedSnapshot(cd *cdv1beta1.ComputeDomain, next snapshot) snapshot {
	s := snapshot{members: next.members, blocked: map[string]string{}, status: cd.Status.Status, numNodes: next.numNodes}
	if len(cd.Status.Nodes) == int(cd.Status.TotalNodes) {
		s.members = make(map[string]bool, len(cd.Status.Nodes))
		for _, n := range cd.Status.Nodes {
			s.members[n.Name] = n.Status == cdv1beta1.StatusReady
		}
	}
	if c := meta.FindStatusCondition(cd.Status.Conditions, cdv1beta1.ConditionNodesBlocked); c != nil && c.Status == metav1.ConditionTrue {
		s.blocked = next.blocked
	}
	if c := meta.FindStatusCondition(cd.Status.Conditions, cdv1beta1.ConditionReady); c != nil {
		s.ready = *c
	}
	s.count()
	return s
}

// changes is what happened between two snapshots.
type changes struct {
	joined, left []string // node names, sorted
	blocked      []string // nodes newly blocked, sorted
	// readiness: status.status turned Ready, or turned from Ready to anything else.
	readiness bool
}

// diff derives the changes from prev to next. A node whose block reason changed is not newly
// blocked; a domain's first report (from "") is a change only when it is Ready.
func diff(prev, next snapshot) changes {
	var c changes
	for n := range next.members {
		if _, ok := prev.members[n]; !ok {
			c.joined = append(c.joined, n)
		}
	}
	for n := range prev.members {
		if _, ok := next.members[n]; !ok {
			c.left = append(c.left, n)
		}
	}
	for n := range next.blocked {
		if _, ok := prev.blocked[n]; !ok {
			c.blocked = append(c.blocked, n)
		}
	}
	slices.Sort(c.joined)
	slices.Sort(c.left)
	slices.Sort(c.blocked)
	c.readiness = (prev.status == cdv1beta1.StatusReady) != (next.status == cdv1beta1.StatusReady)
	return c
}

// eventKind is one rate-limited stream of a domain's events.
type eventKind int

const (
	kindJoined eventKind = iota
	kindLeft
	kindBlocked
	kindReadiness
	numKinds
)

// pending is what one kind's next event reports: the nodes of the latest reconcile that had
// any, and the count of those before it that were held back.
type pending struct {
	latest      []string // at most maxNamedNodes names of the latest reconcile's nodes
	latestCount int
	earlier     int
	// readiness: transitions since the last event, and why the domain was last NotReady.
	transitions  int
	lastNotReady string
}

func (p *pending) empty() bool { return p.latestCount == 0 && p.transitions == 0 }

func (p *pending) addNodes(nodes []string) {
	if len(nodes) == 0 {
		return
	}
	p.earlier += p.latestCount
	p.latestCount = len(nodes)
	p.latest = slices.Clone(nodes[:min(len(nodes), maxNamedNodes)])
}

// bucket is a token bucket (as GCRA: the time at which it is full again), in whole durations so
// that a token is there exactly when wait says: burst tokens, one more every interval.
type bucket struct {
	full     time.Time
	burst    int
	interval time.Duration
}

func newBucket(burst int, interval time.Duration, now time.Time) bucket {
	return bucket{full: now, burst: burst, interval: interval}
}

// take takes a token if there is one.
func (b *bucket) take(now time.Time) bool {
	if b.wait(now) > 0 {
		return false
	}
	if b.full.Before(now) {
		b.full = now
	}
	b.full = b.full.Add(b.interval)
	return true
}

// wait is how long until a token is there: none while the bucket is more than burst-1 tokens
// short of full.
func (b *bucket) wait(now time.Time) time.Duration {
	return max(0, b.full.Sub(now)-time.Duration(b.burst-1)*b.interval)
}

// kindState is one kind's limiter, what it holds back, and its flush timer.
type kindState struct {
	bucket  bucket
	pending pending
	// lastRV is the domain's resourceVersion in the kind's last event: see flushLocked.
	lastRV string
	stop   func() bool // the pending flush timer; nil when none
}

// domainEvents is one domain's state.
type domainEvents struct {
	ref   corev1.ObjectReference // the domain as last read, for the events' regarding
	last  snapshot
	kinds [numKinds]*kindState
}

// emission is one event to post.
type emission struct {
	ref                       corev1.ObjectReference
	eventType, reason, action string
	note                      string
}

// Observe derives the events of one reconcile of cd (as read, before the write) that wrote res
// and st, and posts those the limits allow; call it once the pass's writes succeeded (with
// cliques on, the status may wait for its rest: see pacer), so that events report only what was
// written or is about to be.
func (e *Events) Observe(ctx context.Context, cd *cdv1beta1.ComputeDomain, res membership.Result, st cdv1beta1.ComputeDomainStatus) {
	if e == nil {
		return
	}
	next := snapshotOf(res, st, cd.Spec.NumNodes)
	now := e.clock.Now()
	e.mu.Lock()
	d, ok := e.domains[cd.UID]
	if !ok {
		d = &domainEvents{last: seedSnapshot(cd, next)}
		for k := range d.kinds {
			burst, interval := e.limits.Burst, e.limits.Interval
			if eventKind(k) == kindReadiness {
				burst, interval = e.limits.ReadinessBurst, e.limits.ReadinessInterval
			}
			d.kinds[k] = &kindState{bucket: newBucket(burst, interval, now)}
		}
		e.domains[cd.UID] = d
	}
	d.ref = corev1.ObjectReference{
		APIVersion: cdv1beta1.GroupVersion.String(), Kind: "ComputeDomain",
		Namespace: cd.Namespace, Name: cd.Name, UID: cd.UID, ResourceVersion: cd.ResourceVersion,
	}
	ch := diff(d.last, next)
	prev := d.last
	d.last = next
	d.kinds[kindJoined].pending.addNodes(ch.joined)
	d.kinds[kindLeft].pending.addNodes(ch.left)
	d.kinds[kindBlocked].pending.addNodes(ch.blocked)
	if ch.readiness {
		p := &d.kinds[kindReadiness].pending
		p.transitions++
		if prev.status == cdv1beta1.StatusReady {
			p.lastNotReady = notReadyWhy(next)
		}
	}
	var out []emission
	for k := range numKinds {
		out = append(out, e.flushLocked(cd.UID, d, k, now, true)...)
	}
	e.mu.Unlock()
	e.post(ctx, out)
}

// Forget drops a domain's state and stops its timers: call it when the domain is being deleted.
func (e *Events) Forget(uid types.UID) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	d, ok := e.domains[uid]
	if !ok {
		return
	}
	for _, ks := range d.kinds {
		if ks.stop != nil {
			ks.stop()
		}
	}
	delete(e.domains, uid)
}

// flushLocked returns kind k's event if it has one pending and a token. Without a token it is
// held, and a timer posts it when a token is back. In a reconcile (inPass) an event is also held
// when the domain's resourceVersion is the one of the kind's last event (the cache had not seen
// that reconcile's write yet): client-go's events.k8s.io broadcaster treats an event with the
// same regarding object (resourceVersion included), reason, action and type as the one it posted
// in the last 6 minutes as a repeat, and records it only as a count on that one, its note lost.
// The write that reconcile made brings another reconcile, with a newer resourceVersion.
func (e *Events) flushLocked(uid types.UID, d *domainEvents, k eventKind, now time.Time, inPass bool) []emission {
	ks := d.kinds[k]
	if ks.pending.empty() {
		return nil
	}
	if inPass && d.ref.ResourceVersion == ks.lastRV {
		e.scheduleLocked(uid, k, ks, max(holdRetry, ks.bucket.wait(now)))
		return nil
	}
	if !ks.bucket.take(now) {
		e.scheduleLocked(uid, k, ks, ks.bucket.wait(now))
		return nil
	}
	ev := d.render(k, ks.pending)
	ks.pending = pending{}
	ks.lastRV = d.ref.ResourceVersion
	if ks.stop != nil {
		ks.stop()
		ks.stop = nil
	}
	return []emission{ev}
}

func (e *Events) scheduleLocked(uid types.UID, k eventKind, ks *kindState, after time.Duration) {
	if ks.stop != nil {
		return
	}
	ks.stop = e.clock.AfterFunc(after, func() { e.fire(uid, k) })
}

// fire posts what kind k of the domain held back, when its timer expires.
func (e *Events) fire(uid types.UID, k eventKind) {
	now := e.clock.Now()
	e.mu.Lock()
	d, ok := e.domains[uid]
	if !ok {
		e.mu.Unlock()
		return
	}
	d.kinds[k].stop = nil
	out := e.flushLocked(uid, d, k, now, false)
	e.mu.Unlock()
	e.post(context.Background(), out)
}

func (e *Events) post(ctx context.Context, out []emission) {
	for _, ev := range out {
		ref := ev.ref
		e.rec.Eventf(&ref, nil, ev.eventType, ev.reason, ev.action, "%s", ev.note)
		ctrl.LoggerFrom(ctx).V(2).Info("Posted event", "computeDomain", klog.KRef(ref.Namespace, ref.Name), "reason", ev.reason, "note", ev.note)
	}
}

// render is kind k's event from what is pending and the domain's latest snapshot.
func (d *domainEvents) render(k eventKind, p pending) emission {
	s := d.last
	ev := emission{ref: d.ref, eventType: corev1.EventTypeNormal, action: eventActionMembership}
	totals := fmt.Sprintf("%d joined, %d Ready", len(s.members), s.readyNodes)
	if s.numNodes > 0 {
		totals = fmt.Sprintf("%d of %d joined, %d Ready", len(s.members), s.numNodes, s.readyNodes)
	}
	switch k {
	case kindJoined:
		ev.reason = EventNodesJoined
		ev.note = nodesNote(p, "joined", p.latest) + "; " + totals
	case kindLeft:
		ev.reason = EventNodesLeft
		ev.note = nodesNote(p, "left", p.latest) + "; " + totals
	case kindBlocked:
		ev.reason, ev.eventType, ev.action = EventNodesBlocked, corev1.EventTypeWarning, eventActionStatus
		named := make([]string, len(p.latest))
		for i, n := range p.latest {
			named[i] = n + ": " + orUnknown(s.blocked[n])
		}
		ev.note = nodesNote(p, "blocked", named) + fmt.Sprintf("; IMEX cannot run on %d %s of the domain and their daemons do not retry", len(s.blocked), plural(len(s.blocked), "node", "nodes")) +
			blockedHints(s.blocked, p.latest)
	case kindReadiness:
		ev.action = eventActionStatus
		ev.note = readinessNote(s, p)
		ev.reason = EventDomainReady
		if s.status != cdv1beta1.StatusReady {
			ev.reason, ev.eventType = EventDomainNotReady, corev1.EventTypeWarning
		}
	}
	ev.note = truncateNote(ev.note)
	return ev
}

// nodesNote is "3 nodes joined (a, b, c)", with ", and 412 more joined since the last event"
// when earlier reconciles' nodes were held back.
func nodesNote(p pending, verb string, named []string) string {
	list := strings.Join(named, ", ")
	if more := p.latestCount - len(named); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	note := fmt.Sprintf("%d %s %s (%s)", p.latestCount, plural(p.latestCount, "node", "nodes"), verb, list)
	if p.earlier > 0 {
		note += fmt.Sprintf(", and %d more %s since the last event", p.earlier, verb)
	}
	return note
}

// blockedHints says how to fix the reasons of the named nodes.
func blockedHints(blocked map[string]string, named []string) string {
	var hints []string
	seen := map[string]bool{}
	for _, n := range named {
		why := blocked[n]
		if seen[why] {
			continue
		}
		seen[why] = true
		switch why {
		case cdv1beta1.IMEXBlockedHostIMEXInUse:
			hints = append(hints, why+": a host nvidia-imex service holds the node's IMEX session; stop and disable it "+
				"(systemctl disable --now nvidia-imex) and delete the node's daemon pod, or run the plane with imex.mode=hostManaged")
		case cdv1beta1.IMEXBlockedFabricError:
			hints = append(hints, why+": the node's NVLink fabric registration failed; it serves without NVLink fabric "+
				"(see its kubelet plugin's FabricFailed event)")
		}
	}
	slices.Sort(hints)
	if len(hints) == 0 {
		return "; see the condition " + cdv1beta1.ConditionNodesBlocked
	}
	return ". " + strings.Join(hints, ". ")
}

// readinessNote says what the domain is now and why, and what was folded in.
func readinessNote(s snapshot, p pending) string {
	var note string
	if s.status == cdv1beta1.StatusReady {
		note = "ComputeDomain is Ready"
		if s.ready.Message != "" {
			note += ": " + s.ready.Message
		}
	} else {
		note = "ComputeDomain is NotReady: " + notReadyWhy(s)
	}
	if p.transitions > 1 {
		note += fmt.Sprintf("; its readiness changed %d times since the last event (events held back against flapping)", p.transitions)
		if s.status == cdv1beta1.StatusReady && p.lastNotReady != "" {
			note += "; it was NotReady in between: " + p.lastNotReady
		}
	}
	return note
}

// notReadyWhy is the Ready condition's reason and message, and the blocked nodes if any.
func notReadyWhy(s snapshot) string {
	why := s.ready.Reason
	if why == "" {
		why = "status " + orUnknown(s.status)
	}
	if s.ready.Message != "" {
		why += ": " + s.ready.Message
	}
	if len(s.blocked) > 0 {
		why += fmt.Sprintf(" (%d %s blocked: condition %s)", len(s.blocked), plural(len(s.blocked), "node", "nodes"), cdv1beta1.ConditionNodesBlocked)
	}
	return why
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// truncateNote cuts a note to the events.k8s.io limit, on a character boundary.
func truncateNote(note string) string {
	if len(note) <= maxNoteBytes {
		return note
	}
	const ellipsis = "…"
	cut := maxNoteBytes - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(note[cut]) {
		cut--
	}
	return note[:cut] + ellipsis
}
