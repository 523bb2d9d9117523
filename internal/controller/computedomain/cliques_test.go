package computedomain

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/membership"
	"cdplane/internal/testutil"
)

// counted sets the clique's counts of its one Ready daemon.
func counted(c *cdv1beta1.ComputeDomainClique) *cdv1beta1.ComputeDomainClique {
	c.ReadyDaemons, c.TotalDaemons = 1, 1
	return c
}

func TestClique(t *testing.T) {
	ds := testutil.MakeDaemonSet(cdv1beta1.DaemonSetName(testUID), testDriverNS).UID("ds-uid").Selector(cdv1beta1.ComputeDomainLabel, testUID).Obj()
	entries := []membership.Entry{{NodeName: "n1", IPAddress: "127.0.0.1", CliqueID: "uuid.1", Index: 0, Status: cdv1beta1.StatusReady}}
	want := func() *testutil.CliqueWrapper {
		return testutil.MakeClique(testUID+".uuid.1", testDriverNS).
			Label(cdv1beta1.ComputeDomainLabel, testUID).Label(managedBy, "cdplane").Label(cdv1beta1.CliqueIDLabel, "uuid.1").
			OwnedBy(testutil.ControllerRef("apps/v1", "DaemonSet", ds.Name, "ds-uid")).
			Daemon("n1", "127.0.0.1", "uuid.1", 0, cdv1beta1.StatusReady)
	}
	cases := map[string]struct {
		planeID string
		want    *cdv1beta1.ComputeDomainClique
	}{
		"legacy plane": {want: counted(want().Obj())},
		"plane":        {planeID: "alpha", want: counted(want().Label(cdv1beta1.ControlPlaneLabel, "alpha").Obj())},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := New(nil, nil, Options{DriverNamespace: testDriverNS, ControlPlaneID: tc.planeID})
			got := r.clique(testDomain(), ds, "uuid.1", entries)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("clique (-want +got):\n%s", diff)
			}
			if got.Name != cdv1beta1.CliqueName(testUID, "uuid.1") {
				t.Errorf("clique name %s, want CliqueName's %s", got.Name, cdv1beta1.CliqueName(testUID, "uuid.1"))
			}
		})
	}
}

func TestCliqueUpToDate(t *testing.T) {
	ref := testutil.ControllerRef("apps/v1", "DaemonSet", "ds", "ds-uid")
	oldRef := testutil.ControllerRef("apps/v1", "DaemonSet", "ds", "old-uid")
	clique := func(owner metav1.OwnerReference, status string) *testutil.CliqueWrapper {
		return testutil.MakeClique("c", testDriverNS).Label(cdv1beta1.ComputeDomainLabel, testUID).OwnedBy(owner).
			Daemon("n1", "127.0.0.1", "uuid.1", 0, status)
	}
	cases := map[string]struct {
		current *cdv1beta1.ComputeDomainClique
		want    bool
	}{
		"same":                        {current: clique(ref, cdv1beta1.StatusReady).Obj(), want: true},
		"more labels on the server":   {current: clique(ref, cdv1beta1.StatusReady).Label("other", "x").Obj(), want: true},
		"a label differs":             {current: clique(ref, cdv1beta1.StatusReady).Label(cdv1beta1.ComputeDomainLabel, "other").Obj()},
		"a daemon's status differs":   {current: clique(ref, cdv1beta1.StatusNotReady).Obj()},
		"a daemon more on the server": {current: clique(ref, cdv1beta1.StatusReady).Daemon("n2", "127.0.0.2", "uuid.1", 1, cdv1beta1.StatusReady).Obj()},
		"another owner":               {current: clique(oldRef, cdv1beta1.StatusReady).Obj()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := cliqueUpToDate(tc.current, clique(ref, cdv1beta1.StatusReady).Obj()); got != tc.want {
				t.Errorf("cliqueUpToDate = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestOnlyTurnsReady(t *testing.T) {
	ref := testutil.ControllerRef("apps/v1", "DaemonSet", "ds", "ds-uid")
	clique := func(n1, n2 string) *testutil.CliqueWrapper {
		return testutil.MakeClique("c", testDriverNS).Label(cdv1beta1.ComputeDomainLabel, testUID).OwnedBy(ref).
			Daemon("n1", "127.0.0.1", "uuid.1", 0, n1).Daemon("n2", "127.0.0.2", "uuid.1", 1, n2)
	}
	ready, notReady := cdv1beta1.StatusReady, cdv1beta1.StatusNotReady
	cases := map[string]struct {
		current, desired *cdv1beta1.ComputeDomainClique
		want             bool
	}{
		"one entry turns Ready":   {current: clique(ready, notReady).Obj(), desired: clique(ready, ready).Obj(), want: true},
		"both turn Ready":         {current: clique(notReady, notReady).Obj(), desired: clique(ready, ready).Obj(), want: true},
		"an entry without status": {current: clique("", notReady).Obj(), desired: clique(ready, notReady).Obj(), want: true},
		"one turns NotReady":      {current: clique(ready, ready).Obj(), desired: clique(ready, notReady).Obj()},
		"one turns each way":      {current: clique(ready, notReady).Obj(), desired: clique(notReady, ready).Obj()},
		"a member joins":          {current: clique(ready, notReady).Obj(), desired: clique(ready, ready).Daemon("n3", "127.0.0.3", "uuid.1", 2, notReady).Obj()},
		"a member leaves": {
			current: clique(ready, notReady).Obj(),
			desired: testutil.MakeClique("c", testDriverNS).Label(cdv1beta1.ComputeDomainLabel, testUID).OwnedBy(ref).Daemon("n1", "127.0.0.1", "uuid.1", 0, ready).Obj(),
		},
		"an address changes": {
			current: clique(ready, notReady).Obj(),
			desired: testutil.MakeClique("c", testDriverNS).Label(cdv1beta1.ComputeDomainLabel, testUID).OwnedBy(ref).
				Daemon("n1", "127.0.0.1", "uuid.1", 0, ready).Daemon("n2", "127.0.0.9", "uuid.1", 1, ready).Obj(),
		},
		"an index changes": {
			current: clique(ready, notReady).Obj(),
			desired: testutil.MakeClique("c", testDriverNS).Label(cdv1beta1.ComputeDomainLabel, testUID).OwnedBy(ref).
				Daemon("n1", "127.0.0.1", "uuid.1", 0, ready).Daemon("n2", "127.0.0.2", "uuid.1", 3, ready).Obj(),
		},
		"a label differs": {current: clique(ready, notReady).Label(cdv1beta1.ComputeDomainLabel, "other").Obj(), desired: clique(ready, ready).Obj()},
		"another owner": {
			current: clique(ready, notReady).Obj(),
			desired: testutil.MakeClique("c", testDriverNS).Label(cdv1beta1.ComputeDomainLabel, testUID).OwnedBy(testutil.ControllerRef("apps/v1", "DaemonSet", "ds", "new-uid")).
				Daemon("n1", "127.0.0.1", "uuid.1", 0, ready).Daemon("n2", "127.0.0.2", "uuid.1", 1, ready).Obj(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := onlyTurnsReady(tc.current, tc.desired); got != tc.want {
				t.Errorf("onlyTurnsReady = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAFlipIsHeldUntilAJoinOrTheDomainTurnsReady: in a large domain (its last pass was long), a
// pass whose only change to a clique is an entry turning Ready does not write the clique and
// asks to come back when the hold ends; a join in the clique carries the flip at once, and so
// does the pass that turns the domain Ready.
func TestAFlipIsHeldUntilAJoinOrTheDomainTurnsReady(t *testing.T) {
	cd := testDomain()
	ds := testutil.MakeDaemonSet(cdv1beta1.DaemonSetName(testUID), testDriverNS).UID("ds-uid").Selector(cdv1beta1.ComputeDomainLabel, testUID).Obj()
	key := client.ObjectKeyFromObject(cd)
	entry := func(node, ip string, index int, status string) membership.Entry {
		return membership.Entry{NodeName: node, IPAddress: ip, CliqueID: "uuid.1", Index: index, Status: status}
	}
	n1 := entry("n1", "127.0.0.1", 0, cdv1beta1.StatusNotReady)
	n2 := entry("n2", "127.0.0.2", 1, cdv1beta1.StatusNotReady)
	stored := New(nil, nil, Options{DriverNamespace: testDriverNS}).clique(cd, ds, "uuid.1", []membership.Entry{n1, n2})
	stored.UID = "clique-uid"
	n1.Status = cdv1beta1.StatusReady
	flipped := membership.Result{Cliques: map[string][]membership.Entry{"uuid.1": {n1, n2}}}
	joined := membership.Result{Cliques: map[string][]membership.Entry{"uuid.1": {n1, n2, entry("n3", "127.0.0.3", 2, cdv1beta1.StatusNotReady)}}}

	cases := map[string]struct {
		res      membership.Result
		mayHold  bool
		longPass bool
		written  bool
	}{
		"a flip in a large domain":                    {res: flipped, mayHold: true, longPass: true},
		"a flip in a domain whose passes are short":   {res: flipped, mayHold: true, written: true},
		"a flip in the pass turning the domain Ready": {res: flipped, longPass: true, written: true},
		"a flip with a join":                          {res: joined, mayHold: true, longPass: true, written: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, writes := recordingClient(stored.DeepCopy())
			r := New(c, c, Options{DriverNamespace: testDriverNS})
			r.pacer = newPacer(nil)
			now := time.Unix(1000, 0)
			r.pacer.now = func() time.Time { return now }
			if tc.longPass {
				r.pacer.passed(key, now.Add(-time.Second), 200*time.Millisecond, passHint{})
			}
			held, err := r.writeCliques(t.Context(), key, cd, ds, tc.res, tc.mayHold)
			if err != nil {
				t.Fatalf("writeCliques: %v", err)
			}
			got := len(writes.of("ComputeDomainClique"))
			switch {
			case tc.written && (got != 1 || held != 0):
				t.Errorf("%d clique writes, held %v; want the clique written, nothing held", got, held)
			case !tc.written && (got != 0 || held != maxRest):
				t.Errorf("%d clique writes, held %v; want none, held %v", got, held, maxRest)
			}
		})
	}
}

// TestThePassTurningTheDomainReadyWritesTheStatusFirst: with cliques, the pass whose status turns
// the domain Ready writes the status before the cliques (it may write every clique of the domain,
// the flips held until then), and writes the held flips too.
func TestThePassTurningTheDomainReadyWritesTheStatusFirst(t *testing.T) {
	cd := testDomain()
	cd.Status.Status = cdv1beta1.StatusNotReady
	ds := testutil.MakeDaemonSet(cdv1beta1.DaemonSetName(testUID), testDriverNS).UID("ds-uid").Selector(cdv1beta1.ComputeDomainLabel, testUID).Obj()
	entry := membership.Entry{NodeName: "n1", IPAddress: "127.0.0.1", CliqueID: "uuid.1", Index: 0, Status: cdv1beta1.StatusNotReady}
	stored := New(nil, nil, Options{DriverNamespace: testDriverNS}).clique(cd, ds, "uuid.1", []membership.Entry{entry})
	stored.UID = "clique-uid"
	entry.Status = cdv1beta1.StatusReady
	members := membership.Result{Cliques: map[string][]membership.Entry{"uuid.1": {entry}}}

	c, writes := recordingClient(cd.DeepCopy(), stored)
	r := New(c, c, Options{DriverNamespace: testDriverNS})
	r.pacer = newPacer(nil)
	key := client.ObjectKeyFromObject(cd)
	now := time.Unix(1000, 0)
	r.pacer.now = func() time.Time { return now }
	r.pacer.passed(key, now.Add(-time.Second), 200*time.Millisecond, passHint{}) // a large domain: flips may be held
	s := &scope{key: key, cd: cd, ds: ds, useCliques: true, members: members, step: r.stepTimer(),
		status: membership.Aggregate(members, 1, cd.Generation, nil)}
	if s.status.Status != cdv1beta1.StatusReady {
		t.Fatalf("the test's status says %s, want Ready", s.status.Status)
	}
	if err := r.write(t.Context(), s); err != nil {
		t.Fatalf("write: %v", err)
	}
	var kinds []string
	for _, w := range writes.writes {
		kinds = append(kinds, w.Verb+" "+w.Kind)
	}
	want := []string{"apply/status ComputeDomain", "apply ComputeDomainClique"}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("writes of the pass turning the domain Ready (-want +got):\n%s", diff)
	}
}
