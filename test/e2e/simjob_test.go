package e2e

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/sim"
	"cdplane/internal/testutil"
)

// TestSimJob: `cdplane sim job`'s run on the simulated cluster — a 3-node ComputeDomain job on
// the first plane, followed through a watch of its domain and pods — sees the domain Ready and
// every pod Running, samples them over time (the plot's data), breaks the time down per step
// with every daemon and workload pod counted, and deletes the job and the domain.
func TestSimJob(t *testing.T) {
	e2eOnly(t)
	waitPlanesIdle(t, planeA)
	ns := planeA + "-workloads"
	// RunJob leaves the job in place when it fails; the scenarios after this one need the
	// plane idle.
	t.Cleanup(func() {
		for _, obj := range []client.Object{
			&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "e2e-sim-job"}},
			&cdv1beta1.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "e2e-sim-job"}},
		} {
			if err := c.Delete(ctx(), obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %s: %v", obj.GetName(), err)
			}
		}
	})
	var out strings.Builder
	res, err := sim.RunJob(ctx(), simState, sim.JobOptions{Nodes: 3, Name: "e2e-sim-job", Out: &out, Timeout: 4 * time.Minute})
	t.Logf("sim job:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if res.Ready <= 0 || res.Running <= 0 {
		t.Errorf("domain Ready after %s, pods Running after %s: want both seen", res.Ready, res.Running)
	}
	last := res.Samples[len(res.Samples)-1]
	if len(res.Samples) < 2 || last.ReadyNodes != 3 || last.PodsRunning != 3 {
		t.Errorf("%d samples, the last %+v: want it to show 3 nodes Ready and 3 pods Running", len(res.Samples), last)
	}
	if res.Breakdown == nil {
		t.Fatal("no breakdown")
	}
	counted := map[string]int{}
	for _, r := range res.Breakdown.Steps {
		counted[r.Name] = r.N
	}
	for _, step := range []string{sim.StepDaemonReady, sim.StepWorkloadRunning, sim.StepDomainReady} {
		if want := map[bool]int{true: 1, false: 3}[step == sim.StepDomainReady]; counted[step] != want {
			t.Errorf("breakdown step %q counted %d, want %d (steps: %v)", step, counted[step], want, counted)
		}
	}
	testutil.Eventually(t, 2*time.Minute, "the job and its domain deleted", func() (bool, error) {
		for _, obj := range []client.Object{&batchv1.Job{}, &cdv1beta1.ComputeDomain{}} {
			if err := c.Get(ctx(), client.ObjectKey{Namespace: ns, Name: "e2e-sim-job"}, obj); !apierrors.IsNotFound(err) {
				return false, err
			}
		}
		return true, nil
	})
	waitPlanesIdle(t, planeA)
}
