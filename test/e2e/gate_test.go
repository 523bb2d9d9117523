package e2e

import (
	"fmt"
	"testing"
	"time"

	"cdplane/internal/lifecycle"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/testutil"
)

// Flipping the ComputeDomainCliques gate with a live domain (`cdplane apply plane` with the
// sim's values and the gate). After each flip the test first makes sure the flip happened: the
// controller Deployment and the plugin DaemonSet carry the new value and their running pods
// were started with it, and the controller acts on it — the live domain's cliques go when the
// gate is off and come back when it is on, and a domain created after the flip has cliques
// exactly when the gate is on. Only then does it check what the flip must not change: the live
// domain Ready with the same nodes at the same indexes, the same daemon pods without restarts,
// and every IMEX connected to exactly its clique. The live domain's status is sampled from
// before the first flip to after the last: one NotReady read fails the test.
func TestGateFlipWithLiveDomains(t *testing.T) {
	e2eOnly(t)
	waitPlanesIdle(t, planeB)
	racks := planeRacks(t, planeB)
	nodes := planeNodes(planeB, rackNumber(t, racks[0]))[:2]
	spare := planeNodes(planeB, rackNumber(t, racks[1]))
	ns := namespace(t, planeB)
	cd := computeDomain(t, ns, "cd", 2, "")
	for i, n := range nodes {
		workerPod(t, ns, fmt.Sprintf("w%d", i), "cd", n)
	}
	before, _ := waitMembership(t, planeB, cd, nodes, 2*time.Minute)
	waitStatus(t, cd, cdv1beta1.StatusReady, time.Minute)
	if n := cliques(t, planeB, cd); n == 0 {
		t.Fatalf("with the default gate the domain has no clique objects")
	}
	checkIMEXConnected(t, planeB, cd)
	daemons, err := liveDaemons(t, planeB, cd)
	must(t, err)

	m, err := lifecycle.New(lifecycle.Options{Getter: lifecycle.KubeconfigGetter(simState.ControlPlane.Kubeconfig, ""), Timeout: 3 * time.Minute, Wait: true})
	must(t, err)
	t.Cleanup(func() {
		if err := m.ApplyPlane(ctx(), planeB, simState.PlaneValues(), lifecycle.ResetValues); err != nil {
			t.Errorf("restoring plane %s: %v", planeB, err)
		}
		waitPlaneGate(t, planeB, "")
	})
	live := sampleReady(t, cd)
	for i, on := range []bool{false, true} {
		vals := simState.PlaneValues()
		vals["featureGates"] = map[string]any{"ComputeDomainCliques": on}
		must(t, m.ApplyPlane(ctx(), planeB, vals, lifecycle.ResetValues))
		waitPlaneGate(t, planeB, fmt.Sprint(on))
		testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("gate %v: the live domain's clique objects present: %v", on, on), func() (bool, error) {
			return (cliques(t, planeB, cd) > 0) == on, nil
		})
		after, _ := waitMembership(t, planeB, cd, nodes, 2*time.Minute)
		checkIndexesKept(t, before, after, nodes)
		waitStatus(t, cd, cdv1beta1.StatusReady, time.Minute)
		checkDaemonsKept(t, planeB, cd, daemons)
		checkIMEXConnected(t, planeB, cd)

		name := fmt.Sprintf("after-%d", i)
		fresh := computeDomain(t, ns, name, 1, "")
		workerPod(t, ns, name, name, spare[i])
		waitMembership(t, planeB, fresh, spare[i:i+1], 2*time.Minute)
		waitStatus(t, fresh, cdv1beta1.StatusReady, 2*time.Minute)
		if n := cliques(t, planeB, fresh); (n > 0) != on {
			t.Errorf("gate %v: the domain created after the flip has %d clique objects", on, n)
		}
	}
	live.check(t, "across both gate flips", expectedReads(1, time.Since(live.started)))
}
