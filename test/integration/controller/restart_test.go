package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
)

// TestMembershipFollowsChangesAfterRestart: after the controller restarts, a node leaving and a
// node joining are reflected in the clique, the domain's status and the peers' IMEX; the nodes
// that stay keep their indexes and the new node gets the lowest free one.
func TestMembershipFollowsChangesAfterRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	cd := e.createCD("restart", 3)
	// The nodes join one at a time in reverse name order, so that their indexes (c=0, b=1,
	// a=2) are not those a controller recomputing from scratch would give (by name: a=0).
	daemons := map[string]*node{}
	for i, suffix := range []string{"c", "b", "a"} {
		d := e.startDaemon(cd, e.addNode(cd, suffix), testClique)
		daemons[suffix] = d
		e.eventually(2*time.Minute, fmt.Sprintf("%s has index %d", d.name, i), func() (bool, error) {
			en, ok := entryOf(e.getCD(cd), d.name)
			return ok && en.Index == i, nil
		})
	}
	e.waitStatus(cd, cdv1beta1.StatusReady, 30*time.Second)
	want := map[string]int{daemons["c"].name: 0, daemons["b"].name: 1, daemons["a"].name: 2}
	if diff := cmp.Diff(want, indexes(e.getCD(cd).Status.Nodes)); diff != "" {
		t.Fatalf("indexes before the restart (-want +got):\n%s", diff)
	}

	e.stopMgr()
	e.startManager(true)

	// b leaves (unprepare removed its node label): its entry goes, the domain is short of
	// numNodes, and IMEX on a drops it.
	e.unlabelNode(daemons["b"].name)
	e.eventually(2*time.Minute, "b's entry removed after the restart", func() (bool, error) {
		_, listed := entryOf(e.getCD(cd), daemons["b"].name)
		return !listed, nil
	})
	e.waitStatus(cd, cdv1beta1.StatusNotReady, 20*time.Second)
	// d joins: it takes b's index, the lowest free one.
	daemons["d"] = e.startDaemon(cd, e.addNode(cd, "d"), testClique)
	got := e.waitStatus(cd, cdv1beta1.StatusReady, 30*time.Second)
	want = map[string]int{daemons["c"].name: 0, daemons["d"].name: 1, daemons["a"].name: 2}
	if diff := cmp.Diff(want, indexes(got.Status.Nodes)); diff != "" {
		t.Errorf("status.nodes indexes after the restart, b leaving and d joining (-want +got):\n%s", diff)
	}
	clique := &cdv1beta1.ComputeDomainClique{}
	if err := e.c.Get(e.ctx(), client.ObjectKey{Namespace: e.driverNS, Name: cdv1beta1.CliqueName(string(cd.UID), testClique)}, clique); err != nil {
		t.Fatal(err)
	}
	cliqueIndexes := map[string]int{}
	for _, d := range clique.Daemons {
		cliqueIndexes[d.NodeName] = d.Index
	}
	if diff := cmp.Diff(want, cliqueIndexes); diff != "" {
		t.Errorf("clique indexes after the restart, b leaving and d joining (-want +got):\n%s", diff)
	}
	wantPeers := []string{daemons["c"].ip, daemons["d"].ip}
	e.eventually(2*time.Minute, "IMEX on a connected to c and d only", func() (bool, error) {
		st, err := daemons["a"].status()
		return err == nil && cmp.Equal(wantPeers, st.Connected, cmpopts.SortSlices(func(x, y string) bool { return x < y })), err
	})
}

func indexes(nodes []cdv1beta1.ComputeDomainNode) map[string]int {
	out := map[string]int{}
	for _, n := range nodes {
		out[n.Name] = n.Index
	}
	return out
}
