package readiness

import (
	"strings"
	"testing"
	"time"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/testutil"
)

func TestDaemonReady(t *testing.T) {
	clique := func(status string) *cdv1beta1.ComputeDomainClique {
		return testutil.MakeClique("uid.c", "ns").Daemon("n1", "10.0.0.1", "c", 0, status).Daemon("n2", "10.0.0.2", "c", 1, cdv1beta1.StatusReady).Obj()
	}
	cd := func(status string) *cdv1beta1.ComputeDomain {
		c := testutil.MakeComputeDomain("cd").Obj()
		c.Status.Nodes = []cdv1beta1.ComputeDomainNode{{Name: "n1", CliqueID: "c", Status: status}}
		return c
	}
	cases := map[string]struct {
		clique     *cdv1beta1.ComputeDomainClique
		cd         *cdv1beta1.ComputeDomain
		want       bool
		wantReason string
	}{
		"ready in clique":                 {clique: clique(cdv1beta1.StatusReady), cd: cd(""), want: true},
		"ready in status only":            {clique: nil, cd: cd(cdv1beta1.StatusReady), want: true},
		"ready in status, clique lagging": {clique: clique(cdv1beta1.StatusNotReady), cd: cd(cdv1beta1.StatusReady), want: true},
		"not ready in clique": {clique: clique(cdv1beta1.StatusNotReady), cd: testutil.MakeComputeDomain("cd").Obj(),
			wantReason: "clique uid.c lists the node as NotReady; ComputeDomain status does not list the node yet"},
		"missing from clique": {clique: testutil.MakeClique("uid.c", "ns").Obj(), cd: nil,
			wantReason: "clique uid.c does not list the node yet"},
		"not ready in status": {cd: cd(cdv1beta1.StatusNotReady), wantReason: "ComputeDomain status lists the node as NotReady"},
		"no status":           {cd: cd(""), wantReason: "lists the node as without status"},
		"nothing":             {wantReason: "ComputeDomain status does not list the node yet"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, reason := DaemonReady("n1", tc.clique, tc.cd)
			if got != tc.want || !strings.Contains(reason, tc.wantReason) {
				t.Errorf("DaemonReady = %v %q, want %v containing %q", got, reason, tc.want, tc.wantReason)
			}
		})
	}
}

// TestStatusReadInterval: where the plane keeps cliques and the node has one, a waiter reads the
// domain's status.nodes only as a fallback (after StatusFallbackAfter, then every quarter of it,
// across prepare calls) and never while the clique object exists; elsewhere status.nodes is the
// answer and is read every second (every recheck beside a clique that does not list the node).
func TestStatusReadInterval(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	clique := &cdv1beta1.ComputeDomainClique{}
	newView := func(cliques bool) *View {
		return &View{recheck: 5 * time.Second, cliquesHoldEntries: cliques, statusFallbackAfter: 2 * time.Minute, waitingSince: map[string]waiting{}}
	}

	v := newView(false)
	for _, tc := range []struct {
		cliqueID string
		clique   *cdv1beta1.ComputeDomainClique
		want     time.Duration
	}{{"c.1", nil, statusReadEvery}, {"c.1", clique, 5 * time.Second}, {"", nil, statusReadEvery}} {
		if every, may := v.statusReadInterval("uid", tc.cliqueID, "", tc.clique, t0); !may || every != tc.want {
			t.Errorf("cliques off, clique id %q, clique object %v: every %v may %v; want every %v", tc.cliqueID, tc.clique != nil, every, may, tc.want)
		}
	}

	v = newView(true)
	if every, may := v.statusReadInterval("uid", "", "", nil, t0); !may || every != statusReadEvery {
		t.Errorf("cliques on, node without fabric: every %v may %v; want every %v (its entry is in status.nodes)", every, may, statusReadEvery)
	}
	steps := []struct {
		at     time.Duration
		clique *cdv1beta1.ComputeDomainClique
		may    bool
	}{
		{0, nil, false},                 // began waiting: the clique will come
		{time.Minute, clique, false},    // the clique exists: the entry comes there
		{119 * time.Second, nil, false}, // not waited long enough
		{2 * time.Minute, nil, true},    // fallback: maybe the controller's gate is off
		{2*time.Minute + 10*time.Second, nil, false},
		{2*time.Minute + 30*time.Second, nil, true}, // every quarter of the fallback
	}
	for _, s := range steps {
		if _, may := v.statusReadInterval("uid", "c.1", "", s.clique, t0.Add(s.at)); may != s.may {
			t.Errorf("cliques on, after %v (clique object %v): may read status %v, want %v", s.at, s.clique != nil, may, s.may)
		}
	}
	// Ready: the next wait for the domain starts afresh.
	v.ready("uid")
	if _, may := v.statusReadInterval("uid", "c.1", "", nil, t0.Add(time.Hour)); may {
		t.Error("after Ready, a new wait read the status at once")
	}

	// The controller says where it keeps the membership (MembershipAnnotation): no guessing.
	v = newView(true)
	for _, at := range []time.Duration{0, 2 * time.Minute, time.Hour} {
		if _, may := v.statusReadInterval("uid2", "c.1", cdv1beta1.MembershipInCliques, nil, t0.Add(at)); may {
			t.Errorf("membership in cliques, no clique object after %v: the status was read", at)
		}
	}
	if every, may := v.statusReadInterval("uid3", "c.1", cdv1beta1.MembershipInStatus, nil, t0); !may || every != statusReadEvery {
		t.Errorf("membership in status, plugin's gate on: every %v may %v; want every %v at once", every, may, statusReadEvery)
	}
}
