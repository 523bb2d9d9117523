package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/sim/imexsim"
	"cdplane/internal/testutil"
)

// slowIMEXRelease is how long the node's IMEX session stays held after the previous domain's
// IMEX ended, while the driver releases its memory exports, on the nodes of
// TestBackToBackDomainsOnTheSameNodes: long enough that the next domain's daemon meets it on a
// loaded machine, shorter than the daemon's two minutes of retries.
const slowIMEXRelease = 30 * time.Second

// TestBackToBackDomainsOnTheSameNodes: jobs run back to back on the same nodes, and the driver
// takes seconds to release an IMEX's memory exports after it ended. The second domain's daemons
// start while each node's session is still held and get NV_ERR_IN_USE; they try again until it
// is released: the second domain becomes Ready, and no node is reported blocked.
func TestBackToBackDomainsOnTheSameNodes(t *testing.T) {
	e2eOnly(t)
	waitPlanesIdle(t, planeA)
	racks := planeRacks(t, planeA)
	nodes := planeNodes(planeA, rackNumber(t, racks[0]))[:2]
	for _, n := range nodes {
		p := filepath.Join(stateDir, "nodes", n, imexsim.ShutdownDelayPath)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(slowIMEXRelease.String()), 0o644))
		t.Cleanup(func() { _ = os.Remove(p) })
	}
	ns := namespace(t, planeA)

	first := computeDomain(t, ns, "first", 2, "")
	var workers []*corev1.Pod
	for i, n := range nodes {
		workers = append(workers, workerPod(t, ns, []string{"first-0", "first-1"}[i], "first", n))
	}
	for _, w := range workers {
		waitPodRunning(t, w, 3*time.Minute)
	}
	waitStatus(t, first, cdv1beta1.StatusReady, time.Minute)

	// The next job is queued before the first ends, as a batch scheduler queues it: its domain
	// and claim template exist, its pods wait for the nodes' channel. The first job ends: its
	// pods go, the nodes lose the first domain's label, its daemons stop, and each node's
	// session stays held for slowIMEXRelease while the second domain's daemons start.
	second := computeDomain(t, ns, "second", 2, "")
	testutil.Eventually(t, time.Minute, "the second domain's claim template", func() (bool, error) {
		err := c.Get(ctx(), client.ObjectKey{Namespace: ns, Name: "second"}, &resourcev1.ResourceClaimTemplate{})
		return err == nil, client.IgnoreNotFound(err)
	})
	var next []*corev1.Pod
	for i, n := range nodes {
		next = append(next, workerPod(t, ns, []string{"second-0", "second-1"}[i], "second", n))
	}
	for _, w := range workers {
		must(t, c.Delete(ctx(), w))
	}
	workers = next
	for _, w := range workers {
		waitPodRunning(t, w, 4*time.Minute)
	}
	waitStatus(t, second, cdv1beta1.StatusReady, time.Minute)

	// What was proven: the second domain's daemons did meet a held session (else this test ran
	// without the overlap it is about), and none was reported blocked.
	met := 0
	for _, p := range daemonPods(t, planeA, second) {
		if v, ok := p.Labels[cdv1beta1.IMEXBlockedLabel]; ok {
			t.Errorf("daemon pod %s on %s is labelled blocked (%s)", p.Name, p.Spec.NodeName, v)
		}
		if strings.Contains(logTail(&p, 500), "session is still held") {
			met++
		}
	}
	t.Logf("%d of the second domain's daemons met the first domain's IMEX holding their node's session", met)
	if met == 0 {
		t.Errorf("no daemon of the second domain met the first domain's IMEX still holding its node's session: the overlap this test is about did not happen")
	}
	cur := getCD(t, second)
	for _, cond := range cur.Status.Conditions {
		if cond.Type == cdv1beta1.ConditionNodesBlocked && cond.Status == "True" {
			t.Errorf("the second domain has NodesBlocked: %s", cond.Message)
		}
	}
	for _, w := range workers {
		deleteAndWait(t, w)
	}
	for _, p := range []string{"first-0", "first-1"} {
		deleteAndWait(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p}})
	}
	for _, cd := range []*cdv1beta1.ComputeDomain{first, second} {
		deleteAndWait(t, cd, client.PropagationPolicy("Foreground"))
	}
}
