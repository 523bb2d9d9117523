package e2e

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubectl/pkg/util/podutils"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/plane"
	"cdplane/internal/sim"
	"cdplane/internal/testutil"
)

// Restarting a plane's leading controller with a live domain (of its two replicas, the one the
// lease names): the daemons carry on (same pods, no
// container restart, IMEX still connected), the new controller keeps membership following the
// workload (a node added, then one removed: status and cliques follow, the other nodes keep
// their indexes, every IMEX reconnects to exactly its clique), and it serves a new domain.
func TestControllerRestartWithLiveDomain(t *testing.T) {
	e2eOnly(t)
	liveDomainAcrossRestart(t, planeB, func(t *testing.T) {
		driverNS := plane.Name(planeB, plane.DriverNamespaceLegacyName)
		lease := &coordinationv1.Lease{}
		must(t, c.Get(ctx(), client.ObjectKey{Namespace: driverNS, Name: plane.Name(planeB, "cdplane-controller")}, lease))
		old := &corev1.Pod{}
		must(t, c.Get(ctx(), client.ObjectKey{Namespace: driverNS, Name: ptrValue(lease.Spec.HolderIdentity)}, old))
		// The leader, asked to stop, releases its lease: the standby takes over at once.
		deleteAndWait(t, old)
		testutil.Eventually(t, 2*time.Minute, "the leader's replacement Ready and the lease held by a live replica", func() (bool, error) {
			pods, err := controllerPods(driverNS)
			if err != nil || len(pods) != 2 {
				return false, err
			}
			if err := c.Get(ctx(), client.ObjectKeyFromObject(lease), lease); err != nil {
				return false, err
			}
			holder := ptrValue(lease.Spec.HolderIdentity)
			held := false
			for _, p := range pods {
				if p.UID == old.UID || !podutils.IsPodReady(&p) {
					return false, nil
				}
				held = held || p.Name == holder
			}
			return held, nil
		})
	})
}

// Restarting kube-apiserver with a live domain: every read of the domain's status from before
// the restart to ten seconds after the apiserver answers again finds it Ready; every component reconnects: the daemons carry on and
// their IMEX stays connected, and membership changes after the restart reach the controller,
// the plugins (a new node's prepare) and the daemons already running (their IMEX reloads with
// the new peer and without the one that left), and a new domain becomes Ready.
func TestAPIServerRestartWithLiveDomains(t *testing.T) {
	e2eOnly(t)
	liveDomainAcrossRestart(t, planeA, func(t *testing.T) {
		must(t, sim.RestartComponent(ctx(), simState, stateDir, "kube-apiserver", 2*time.Minute))
	})
}

// liveDomainAcrossRestart runs a domain of plane id on two nodes of one rack, restarts
// something, then checks that the daemons carried on and that membership still follows the
// workload: a third node of the rack joins, then the first leaves.
func liveDomainAcrossRestart(t *testing.T, id string, restart func(t *testing.T)) {
	t.Helper()
	waitPlanesIdle(t, id)
	racks := planeRacks(t, id)
	nodes := planeNodes(id, rackNumber(t, racks[0]))
	spare := planeNodes(id, rackNumber(t, racks[1]))[0]
	if len(nodes) < 3 {
		t.Fatalf("rack %s of plane %s has %d nodes, want 3", racks[0], id, len(nodes))
	}
	n0, n1, n2 := nodes[0], nodes[1], nodes[2]
	ns := namespace(t, id)
	cd := computeDomain(t, ns, "cd", 2, "")
	w0 := workerPod(t, ns, "w0", "cd", n0)
	workerPod(t, ns, "w1", "cd", n1)
	before, _ := waitMembership(t, id, cd, []string{n0, n1}, 2*time.Minute)
	waitStatus(t, cd, cdv1beta1.StatusReady, time.Minute)
	checkIMEXConnected(t, id, cd)
	daemons, err := liveDaemons(t, id, cd)
	must(t, err)

	// Ready throughout: sampled from before the restart until ten seconds' worth of reads after
	// it ended have succeeded (within two minutes: the clients reconnect). Reads that fail while
	// the apiserver is away are counted, not taken as Ready; every read must find it Ready.
	live := sampleReady(t, cd)
	restart(t)
	restarted, after := live.successful(), int(10*time.Second/sampleInterval)
	testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("%d reads of the live domain's status after the restart", after), func() (bool, error) {
		return live.successful()-restarted >= after, nil
	})
	live.check(t, "across the restart", after)
	// The daemons carry on, and so does IMEX.
	checkDaemonsKept(t, id, cd, daemons)
	checkIMEXConnected(t, id, cd)

	// Membership follows the workload: a node joins...
	workerPod(t, ns, "w2", "cd", n2)
	joined, _ := waitMembership(t, id, cd, []string{n0, n1, n2}, 2*time.Minute)
	checkIndexesKept(t, before, joined, []string{n0, n1})
	waitStatus(t, cd, cdv1beta1.StatusReady, time.Minute)
	checkIMEXConnected(t, id, cd)
	checkDaemonsKept(t, id, cd, daemons)
	// ...and one leaves.
	deleteAndWait(t, w0)
	left, _ := waitMembership(t, id, cd, []string{n1, n2}, 2*time.Minute)
	checkIndexesKept(t, joined, left, []string{n1, n2})
	waitStatus(t, cd, cdv1beta1.StatusReady, time.Minute)
	checkIMEXConnected(t, id, cd)
	delete(daemons, n0)
	checkDaemonsKept(t, id, cd, daemons)

	// And a new domain is served.
	fresh := computeDomain(t, ns, "after", 1, "")
	workerPod(t, ns, "after", "after", spare)
	waitStatus(t, fresh, cdv1beta1.StatusReady, 2*time.Minute)
}

// checkDaemonsKept asserts that each node of before still runs the same daemon pod, whose
// containers did not restart.
func checkDaemonsKept(t *testing.T, id string, cd *cdv1beta1.ComputeDomain, before map[string]corev1.Pod) {
	t.Helper()
	now, err := liveDaemons(t, id, cd)
	must(t, err)
	for node, old := range before {
		p, ok := now[node]
		switch {
		case !ok:
			t.Errorf("no daemon pod on %s any more (was %s)", node, old.Name)
		case p.UID != old.UID:
			t.Errorf("the daemon pod on %s was replaced: %s (%s) is now %s (%s)", node, old.Name, old.UID, p.Name, p.UID)
		case restarts(&p) != restarts(&old):
			t.Errorf("the daemon on %s restarted: %d container restarts, %d before", node, restarts(&p), restarts(&old))
		}
	}
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

func rackNumber(t *testing.T, rack string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(rack, &n); err != nil {
		t.Fatalf("rack %q: %v", rack, err)
	}
	return n
}
