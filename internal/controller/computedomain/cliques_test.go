package computedomain

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
