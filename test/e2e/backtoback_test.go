package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/sim/imexsim"
)

// slowIMEXRelease is how long the previous domain's IMEX keeps the node's IMEX session after its
// pod was told to stop, on the nodes of TestBackToBackDomainsOnTheSameNodes: long enough that
// the next domain's daemon meets it, shorter than the daemon pod's 30 s grace period.
const slowIMEXRelease = 20 * time.Second

// TestBackToBackDomainsOnTheSameNodes: jobs run back to back on the same nodes, and a real IMEX
// takes seconds to release its memory exports. The second domain's daemons start while the
// first domain's IMEX still holds each node's session and get NV_ERR_IN_USE; they try again
// until it is released: the second domain becomes Ready, and no node is reported blocked.
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

	// The first job ends: its pods go, the nodes lose the first domain's label, its daemons are
	// told to stop, and their IMEX holds each node's session for slowIMEXRelease.
	for _, w := range workers {
		deleteAndWait(t, w)
	}
	second := computeDomain(t, ns, "second", 2, "")
	workers = workers[:0]
	for i, n := range nodes {
		workers = append(workers, workerPod(t, ns, []string{"second-0", "second-1"}[i], "second", n))
	}
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
	for _, cd := range []*cdv1beta1.ComputeDomain{first, second} {
		deleteAndWait(t, cd, client.PropagationPolicy("Foreground"))
	}
}
