package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
)

// fakeDaemonPod creates a pod on node labelled for the domain and with clique, Running and
// Ready, controlled by owner when it is set: a daemon pod as the kubelet reports it, or a pod
// someone else made to look like one.
func (e *env) fakeDaemonPod(cd *cdv1beta1.ComputeDomain, node, clique string, owner *metav1.OwnerReference) *corev1.Pod {
	e.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "daemon-", Namespace: e.driverNS,
			Labels: map[string]string{cdv1beta1.ComputeDomainLabel: string(cd.UID), "app.kubernetes.io/managed-by": "cdplane", cdv1beta1.CliqueIDLabel: clique},
		},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "daemon", Image: "cdplane:test"}}},
	}
	if owner != nil {
		pod.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	if err := e.c.Create(e.ctx(), pod); err != nil {
		e.t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: loopbackIP(), Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := e.c.Status().Update(e.ctx(), pod); err != nil {
		e.t.Fatal(err)
	}
	return pod
}

// members returns the nodes listed in the domain's status and in its cliques.
func (e *env) members(cd *cdv1beta1.ComputeDomain) (inStatus, inCliques sets.Set[string]) {
	e.t.Helper()
	inStatus, inCliques = sets.New[string](), sets.New[string]()
	for _, n := range e.getCD(cd).Status.Nodes {
		inStatus.Insert(n.Name)
	}
	cliques := &cdv1beta1.ComputeDomainCliqueList{}
	if err := e.c.List(e.ctx(), cliques, client.InNamespace(e.driverNS), client.MatchingLabels{cdv1beta1.ComputeDomainLabel: string(cd.UID)}); err != nil {
		e.t.Fatal(err)
	}
	for _, c := range cliques.Items {
		for _, d := range c.Daemons {
			inCliques.Insert(d.NodeName)
		}
	}
	return inStatus, inCliques
}

// TestNodeLabelAloneDoesNotJoin: a node that labels itself into a domain (a compromised node
// can), a claim of the domain's config made in another namespace, or a pod that looks like a
// daemon but is not the domain's DaemonSet's: none makes a node a member, in status or in a
// clique. Membership needs the label, a channel claim of the domain allocated on the node by the
// scheduler, and a pod controlled by the domain's DaemonSet.
func TestNodeLabelAloneDoesNotJoin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	cd := e.createCD("guarded", 1)
	owner, err := e.daemonSetRef(cd)
	if err != nil {
		t.Fatal(err)
	}
	legit := e.addNode(cd, "legit")
	e.startDaemon(cd, legit, testClique)
	e.waitStatus(cd, cdv1beta1.StatusReady, 20*time.Second)

	// A node labelled for the domain, with a daemon pod of the DaemonSet, but no claim.
	selfLabelled := e.labelNode(cd, "self-labelled")
	e.fakeDaemonPod(cd, selfLabelled, testClique, &owner)
	// A claim with the domain's config, allocated on the node, in another tenant's namespace.
	foreignNS := e.labelNode(cd, "foreign-ns")
	other := testCluster.Namespace(t, nil)
	foreignClaim := channelClaim(cd, other, foreignNS)
	if err := allocate(e.ctx(), e.c, foreignClaim, foreignNS); err != nil {
		t.Fatal(err)
	}
	e.fakeDaemonPod(cd, foreignNS, testClique, &owner)
	// A node with the label and an allocated claim, whose "daemon" pod nobody's DaemonSet owns.
	strayPod := e.addNode(cd, "stray-pod")
	stray := e.fakeDaemonPod(cd, strayPod, testClique, nil)

	// A legitimate node created after every attacker's node, claim and pod: once it is listed,
	// the controller has seen them all (each kind's events arrive in order).
	sentinel := e.addNode(cd, "sentinel")
	e.fakeDaemonPod(cd, sentinel, testClique, &owner)
	e.eventually(2*time.Minute, "the sentinel node listed", func() (bool, error) {
		st, cl := e.members(cd)
		return st.Has(sentinel) && cl.Has(sentinel), fmt.Errorf("status %v, cliques %v", sets.List(st), sets.List(cl))
	})
	st, cl := e.members(cd)
	for _, attacker := range []string{selfLabelled, foreignNS, strayPod} {
		if st.Has(attacker) || cl.Has(attacker) {
			t.Errorf("node %s is a member (status %v, cliques %v)", attacker, st.Has(attacker), cl.Has(attacker))
		}
	}

	// Control: what was missing is all that kept them out. The scheduler allocates a claim on
	// the self-labelled node, and the stray pod is replaced by the DaemonSet's: both join.
	if err := e.allocateClaim(e.c, cd, selfLabelled); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(e.ctx(), stray, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	e.fakeDaemonPod(cd, strayPod, testClique, &owner)
	e.eventually(2*time.Minute, "both join once allocated and owned", func() (bool, error) {
		st, cl := e.members(cd)
		return st.HasAll(selfLabelled, strayPod) && cl.HasAll(selfLabelled, strayPod) && !st.Has(foreignNS),
			fmt.Errorf("status %v, cliques %v", sets.List(st), sets.List(cl))
	})
}

// TestInvalidCliqueLabelWithholdsOneNode: a daemon pod labelled with a value no clique can be
// named after withholds that node only, with a condition naming it and the value; the rest of
// the domain converges (its clique and status are written).
func TestInvalidCliqueLabelWithholdsOneNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	cd := e.createCD("withheld", 1)
	owner, err := e.daemonSetRef(cd)
	if err != nil {
		t.Fatal(err)
	}
	const bad = "Bad_Clique.1" // a valid label value, but not a DNS subdomain: "<uid>.Bad_Clique.1" names nothing
	bad1 := e.addNode(cd, "bad")
	badPod := e.fakeDaemonPod(cd, bad1, bad, &owner)
	good := e.addNode(cd, "good")
	e.startDaemon(cd, good, testClique)

	got := e.waitStatus(cd, cdv1beta1.StatusReady, 30*time.Second)
	if _, listed := entryOf(got, bad1); listed {
		t.Errorf("node %s with clique label %q is listed", bad1, bad)
	}
	if _, listed := entryOf(got, good); !listed {
		t.Errorf("node %s is not listed", good)
	}
	c := meta.FindStatusCondition(got.Status.Conditions, cdv1beta1.ConditionNodesWithheld)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != cdv1beta1.ReasonInvalidCliqueLabel ||
		!strings.Contains(c.Message, bad1) || !strings.Contains(c.Message, bad) {
		t.Errorf("NodesWithheld condition %+v, want True/%s naming %s and %q", c, cdv1beta1.ReasonInvalidCliqueLabel, bad1, bad)
	}
	if _, cl := e.members(cd); !cl.Has(good) {
		t.Errorf("the good node's clique does not list it: %v", sets.List(cl))
	}

	// The daemon relabels its pod with a valid id: the node joins and nothing is withheld.
	orig := badPod.DeepCopy()
	badPod.Labels[cdv1beta1.CliqueIDLabel] = testClique
	if err := e.c.Patch(e.ctx(), badPod, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	e.eventually(2*time.Minute, "the node joins once its label is valid", func() (bool, error) {
		cur := e.getCD(cd)
		_, listed := entryOf(cur, bad1)
		c := meta.FindStatusCondition(cur.Status.Conditions, cdv1beta1.ConditionNodesWithheld)
		return listed && c != nil && c.Status == metav1.ConditionFalse, fmt.Errorf("listed=%v condition %+v", listed, c)
	})
}
