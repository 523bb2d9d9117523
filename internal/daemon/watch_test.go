package daemon

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/imex"
	"cdplane/internal/scheme"
	"cdplane/internal/testutil"
)

// storeOf is a source holding obj, as a synced watch holds it; nil: an empty source.
func storeOf(t *testing.T, obj any) *source {
	t.Helper()
	store := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	if obj != nil {
		if err := store.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	return &source{store: store}
}

// TestMembershipViewPeers: the peers, this node's entry and whether it is Ready, from the clique
// or the domain's status.
func TestMembershipViewPeers(t *testing.T) {
	const c1, c2 = "uuid.1", "uuid.2"
	clique := testutil.MakeClique("cd-uid."+c1, "driver").
		Daemon("n3", "127.0.0.3", c1, 2, cdv1beta1.StatusReady).
		Daemon("n1", "127.0.0.1", c1, 0, cdv1beta1.StatusNotReady).
		Daemon("n2", "127.0.0.2", c1, 1, cdv1beta1.StatusReady).Obj()
	domain := testutil.MakeComputeDomain("cd").Namespace("ns").Obj()
	domain.Status.Nodes = []cdv1beta1.ComputeDomainNode{
		{Name: "n2", IPAddress: "127.0.0.2", CliqueID: c1, Index: 1, Status: cdv1beta1.StatusReady},
		{Name: "x1", IPAddress: "127.0.1.1", CliqueID: c2, Index: 0, Status: cdv1beta1.StatusReady},
		{Name: "n1", IPAddress: "127.0.0.1", CliqueID: c1, Index: 0},
	}
	p := func(node, ip string, index int) imex.Peer {
		return imex.Peer{NodeName: node, IPAddress: ip, Index: index}
	}
	selfPeer := func(node, ip string, index int) *imex.Peer { s := p(node, ip, index); return &s }
	cases := map[string]struct {
		clique   any
		domain   any // nil: no domain watch (the clique exists)
		node     string
		want     []imex.Peer
		wantSelf *imex.Peer
		// wantReady: this node's entry is Ready.
		wantReady bool
	}{
		"from the clique, by index, whatever their status": {
			clique: clique, node: "n1",
			want:     []imex.Peer{p("n1", "127.0.0.1", 0), p("n2", "127.0.0.2", 1), p("n3", "127.0.0.3", 2)},
			wantSelf: selfPeer("n1", "127.0.0.1", 0),
		},
		"the clique wins over the domain's status": {
			clique: clique, domain: domain, node: "n3",
			want:     []imex.Peer{p("n1", "127.0.0.1", 0), p("n2", "127.0.0.2", 1), p("n3", "127.0.0.3", 2)},
			wantSelf: selfPeer("n3", "127.0.0.3", 2), wantReady: true,
		},
		"no clique: the domain's entries of this clique only": {
			domain: domain, node: "n2",
			want:     []imex.Peer{p("n1", "127.0.0.1", 0), p("n2", "127.0.0.2", 1)},
			wantSelf: selfPeer("n2", "127.0.0.2", 1), wantReady: true,
		},
		"this node has no entry yet": {
			clique: clique, node: "n9",
			want: []imex.Peer{p("n1", "127.0.0.1", 0), p("n2", "127.0.0.2", 1), p("n3", "127.0.0.3", 2)},
		},
		"entries without an index or an address are not peers": {
			clique: testutil.MakeClique("cd-uid."+c1, "driver").
				Daemon("n1", "127.0.0.1", c1, 0, cdv1beta1.StatusReady).
				Daemon("n2", "", c1, 1, cdv1beta1.StatusNotReady).
				Daemon("n3", "127.0.0.3", c1, cdv1beta1.FabriclessIndex, cdv1beta1.StatusReady).Obj(),
			node: "n2",
			want: []imex.Peer{p("n1", "127.0.0.1", 0)},
		},
		"neither clique nor domain yet": {node: "n1"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m := &membershipView{cfg: Config{CliqueID: c1}, clique: storeOf(t, tc.clique)}
			if tc.domain != nil {
				m.domain = storeOf(t, tc.domain)
			}
			peers, self := m.peers(tc.node)
			if diff := cmp.Diff(tc.want, peers); diff != "" {
				t.Errorf("peers (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantSelf, self); diff != "" {
				t.Errorf("own entry (-want +got):\n%s", diff)
			}
			if got := m.ready(tc.node); got != tc.wantReady {
				t.Errorf("own entry Ready: %v, want %v", got, tc.wantReady)
			}
		})
	}
}

// TestMembershipViewReadsTheDomainOnlyWhenTheCliqueCannotCarryTheEntry: with the controller
// keeping cliques (Config.Cliques) a daemon does not read the domain's status while it waits
// for its clique; it does once the clique it saw went (the gate was turned off), or when the
// clique did not come within CliqueWait and the domain, once read, does not say its membership
// is in cliques (its controller's gate is off, or it is NVIDIA's, which does not say). Without
// cliques it reads the domain whenever the clique is absent. Never while the clique exists.
func TestMembershipViewReadsTheDomainOnlyWhenTheCliqueCannotCarryTheEntry(t *testing.T) {
	start := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	view := func(cliques bool, place *placeFollower) (*membershipView, *time.Time) {
		now := start
		return &membershipView{cfg: Config{Cliques: cliques}, started: start, now: func() time.Time { return now }, place: place}, &now
	}

	for name, tc := range map[string]struct {
		place *placeFollower
		want  bool
	}{
		"not read yet":           {place: &placeFollower{}, want: false},
		"read: in cliques":       {place: readPlace(cdv1beta1.MembershipInCliques), want: false},
		"read: in status":        {place: readPlace(cdv1beta1.MembershipInStatus), want: true},
		"read: no annotation":    {place: readPlace(""), want: true},
		"read: an unknown place": {place: readPlace("elsewhere"), want: true},
	} {
		m, now := view(true, tc.place)
		if m.wantDomain(false) {
			t.Errorf("%s: cliques on, no clique yet: the domain is read", name)
		}
		*now = start.Add(CliqueWait - time.Second)
		if m.wantDomain(false) {
			t.Errorf("%s: cliques on, no clique %v after the start: the domain is read", name, CliqueWait-time.Second)
		}
		*now = start.Add(CliqueWait)
		if got := m.wantDomain(false); got != tc.want {
			t.Errorf("%s: cliques on, no clique after %v: domain read %v, want %v", name, CliqueWait, got, tc.want)
		}
	}

	m, now := view(true, readPlace(cdv1beta1.MembershipInStatus))
	m.cfg.CliqueWait = time.Second
	*now = start.Add(time.Second)
	if !m.wantDomain(false) {
		t.Errorf("Config.CliqueWait 1s, no clique after 1s, membership in status: the domain is not read")
	}

	place := readPlace(cdv1beta1.MembershipInCliques)
	m, _ = view(true, place)
	if m.wantDomain(true) {
		t.Errorf("cliques on, clique present: the domain is read")
	}
	select {
	case <-place.done:
	default:
		t.Errorf("cliques on, clique present: the reads of the domain's membership place go on")
	}
	if !m.wantDomain(false) {
		t.Errorf("cliques on, the clique seen went: the domain is not read")
	}
	if m.wantDomain(true) {
		t.Errorf("cliques on, the clique is back: the domain is still read")
	}

	m, _ = view(false, nil)
	if !m.wantDomain(false) {
		t.Errorf("cliques off, no clique: the domain is not read")
	}
	if m.wantDomain(true) {
		t.Errorf("cliques off, clique present: the domain is read")
	}
}

// readPlace is a follower that has read place and stopped reading.
func readPlace(place string) *placeFollower {
	done := make(chan struct{})
	var once sync.Once
	return &placeFollower{cancel: func() { once.Do(func() { close(done) }) }, done: done, place: place, known: true}
}

// TestFollowPlace: the domain's membership place is read first after the wait, again after the
// wait while it is in cliques and after the retry when a read failed (a failure is not a
// place), and no more once it is elsewhere; every completed read notifies. Stopped, it reads
// no more.
func TestFollowPlace(t *testing.T) {
	type answer struct {
		place string
		err   error
	}
	answers := []answer{{err: errors.New("429")}, {place: cdv1beta1.MembershipInCliques}, {place: cdv1beta1.MembershipInCliques}, {place: cdv1beta1.MembershipInStatus}}
	var mu sync.Mutex
	var reads, notified int
	f := followPlace(t.Context(), 5*time.Millisecond, time.Millisecond, func(context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		reads++
		if reads > len(answers) {
			t.Errorf("read %d: after the place was status", reads)
			return cdv1beta1.MembershipInStatus, nil
		}
		return answers[reads-1].place, answers[reads-1].err
	}, func() {
		mu.Lock()
		defer mu.Unlock()
		notified++
	})
	select {
	case <-f.done:
	case <-time.After(time.Minute):
		t.Fatal("the follower did not end after the place was status")
	}
	mu.Lock()
	if reads != 4 || notified != 3 {
		t.Errorf("%d reads, %d notifications; want 4 reads (one failed) and 3 notifications", reads, notified)
	}
	mu.Unlock()
	if p, known := f.get(); !known || p != cdv1beta1.MembershipInStatus {
		t.Errorf("place %q (known %v), want %q", p, known, cdv1beta1.MembershipInStatus)
	}

	// Stopped while the place is in cliques: stop returns once no read runs or will.
	readsSoFar := make(chan int)
	var n int
	f = followPlace(t.Context(), time.Millisecond, time.Millisecond, func(ctx context.Context) (string, error) {
		n++
		select {
		case readsSoFar <- n:
		case <-ctx.Done():
		}
		return cdv1beta1.MembershipInCliques, nil
	}, func() {})
	for range 3 { // let three reads happen
		<-readsSoFar
	}
	f.stop()
	select {
	case <-f.done: // the reader has returned: no read can follow
	default:
		t.Fatal("stop returned with the reader running")
	}
}

// forbiddenGetter refuses every GET, as an apiserver does when RBAC lacks the grant.
type forbiddenGetter struct{ client.Client }

func (forbiddenGetter) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return apierrors.NewForbidden(schema.GroupResource{Group: cdv1beta1.GroupName, Resource: "computedomains"}, "cd", errors.New("no grant"))
}

// TestPlaceReaderLogsAFailedRead: a refused read of the domain's membership place is returned
// to the follower (which retries it) and logged, so that a daemon left waiting says why; a read
// ended by the daemon's own stop is not logged.
func TestPlaceReaderLogsAFailedRead(t *testing.T) {
	var logged []string
	log := funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{})
	read := placeReader(forbiddenGetter{}, Config{CDNamespace: "ns", CDName: "cd"}, log)
	if _, err := read(t.Context()); !apierrors.IsForbidden(err) {
		t.Fatalf("error %v, want the Forbidden", err)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "Reading where the domain keeps its membership") || !strings.Contains(logged[0], "forbidden") {
		t.Fatalf("logged %q, want one line naming the read and the Forbidden", logged)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := read(ctx); err == nil {
		t.Fatal("a refused read returned no error")
	}
	if len(logged) != 1 {
		t.Errorf("a read during stop was logged: %q", logged[1:])
	}
}

// TestCliqueWaitCountsFromTheLabel: the wait for the clique starts when the daemon's pod is
// labelled (registered), not when the daemon started: the controller places no daemon before
// it sees that label, and a daemon whose label waited minutes to be admitted must not then
// read the domain at once. Before the label, nothing follows the domain's membership place and
// the domain is not wanted however long it has been; after, the place is read after the wait.
func TestCliqueWaitCountsFromTheLabel(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	cfg := Config{Cliques: true, CliqueWait: 20 * time.Millisecond, CliqueID: "c1", CDUID: "cd-uid",
		PodNamespace: "driver", CDNamespace: "ns", CDName: "cd"}
	m := newMembershipView(t.Context(), c, cfg, func() {}, logr.Discard())
	defer m.close()
	reads := make(chan struct{}, 100)
	m.readPlace = func(context.Context) (string, error) {
		reads <- struct{}{}
		return cdv1beta1.MembershipInStatus, nil
	}
	start := time.Now()
	now := start
	m.now = func() time.Time { return now }

	if m.place != nil {
		t.Fatal("the membership place is followed before the pod is labelled")
	}
	now = start.Add(time.Hour)
	if m.wantDomain(false) {
		t.Error("an hour after the start, not labelled yet: the domain is read")
	}

	m.registered()
	if m.place == nil {
		t.Fatal("labelled: the membership place is not followed")
	}
	now = now.Add(cfg.CliqueWait - time.Nanosecond)
	if m.wantDomain(false) {
		t.Errorf("%v after the label: the domain is read", cfg.CliqueWait-time.Nanosecond)
	}
	select {
	case <-reads:
	case <-time.After(time.Minute):
		t.Fatal("the membership place was not read after the wait")
	}
	if err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, known := m.place.get()
		return known, nil
	}); err != nil {
		t.Fatalf("the membership place read is not kept: %v", err)
	}
	now = now.Add(time.Nanosecond)
	if !m.wantDomain(false) {
		t.Errorf("%v after the label, no clique, membership in status: the domain is not read", cfg.CliqueWait)
	}
}
