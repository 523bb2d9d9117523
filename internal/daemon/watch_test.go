package daemon

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/imex"
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
// for its clique, does once the clique it saw went (the gate was turned off) or when the clique
// did not come within CliqueWait; without cliques it reads the domain whenever the clique is
// absent. Never while the clique exists.
func TestMembershipViewReadsTheDomainOnlyWhenTheCliqueCannotCarryTheEntry(t *testing.T) {
	start := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	view := func(cliques bool) (*membershipView, *time.Time) {
		now := start
		return &membershipView{cfg: Config{Cliques: cliques}, started: start, now: func() time.Time { return now }}, &now
	}

	m, now := view(true)
	if m.wantDomain(false) {
		t.Errorf("cliques on, no clique yet: the domain is read")
	}
	*now = start.Add(CliqueWait - time.Second)
	if m.wantDomain(false) {
		t.Errorf("cliques on, no clique %v after the start: the domain is read", CliqueWait-time.Second)
	}
	*now = start.Add(CliqueWait)
	if !m.wantDomain(false) {
		t.Errorf("cliques on, no clique after %v: the domain is not read", CliqueWait)
	}

	m, _ = view(true)
	if m.wantDomain(true) {
		t.Errorf("cliques on, clique present: the domain is read")
	}
	if !m.wantDomain(false) {
		t.Errorf("cliques on, the clique seen went: the domain is not read")
	}
	if m.wantDomain(true) {
		t.Errorf("cliques on, the clique is back: the domain is still read")
	}

	m, _ = view(false)
	if !m.wantDomain(false) {
		t.Errorf("cliques off, no clique: the domain is not read")
	}
	if m.wantDomain(true) {
		t.Errorf("cliques off, clique present: the domain is read")
	}
}

// TestAnyVersion: a first watch that streams its initial state starts from the watch cache's
// version, not etcd's latest; a resumed watch and a plain watch keep what the reflector asked.
func TestAnyVersion(t *testing.T) {
	yes := true
	cases := map[string]struct {
		in   metav1.ListOptions
		want string
	}{
		"first watch-list":   {in: metav1.ListOptions{SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}, want: "0"},
		"resumed watch-list": {in: metav1.ListOptions{SendInitialEvents: &yes, ResourceVersion: "123", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}, want: "123"},
		"plain watch":        {in: metav1.ListOptions{}, want: ""},
		"resumed plain":      {in: metav1.ListOptions{ResourceVersion: "7"}, want: "7"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			opts := tc.in
			anyVersion(&opts)
			if opts.ResourceVersion != tc.want {
				t.Errorf("resourceVersion %q, want %q", opts.ResourceVersion, tc.want)
			}
		})
	}
}
