package e2e

import (
	"fmt"
	"sort"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubectl/pkg/util/podutils"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/testutil"
)

// Failover while a 2-rack IMEX job runs: force-deleting a worker (the Job replaces it),
// force-deleting every daemon pod (the DaemonSet replaces them) and deleting a worker (the job
// goes on with three). Each time the test waits for what replaced the disrupted pods and for the
// controller to list the domain's nodes at the IPs of their current daemon pods (a status from
// before the disruption cannot say that), every node whose worker was left alone keeps its IMEX
// index, every IMEX is connected both ways to exactly its clique's other members, and only
// then is the job released: its pods finish once their own node's IMEX is connected to the
// peers the test expects, so the job completes only if IMEX works.
func TestFailoverDuringTwoRackJob(t *testing.T) {
	e2eOnly(t)
	for name, tc := range map[string]struct {
		// replaceOnlyFailed sets the Job's podReplacementPolicy to Failed: the Job waits for a
		// deleted worker to finish before deciding whether to replace it. With the default
		// (TerminatingOrFailed) the Job controller counts a deleted worker as failed when it
		// sees the deletion before the worker's exit, and replaces it: a race with the kubelet.
		replaceOnlyFailed bool
		// disrupt disrupts the running job and returns the nodes whose workers it left alone.
		disrupt func(t *testing.T, f *failover) []string
		// settled waits until the cluster has replaced what was disrupted and returns the nodes
		// the domain must span.
		settled func(t *testing.T, f *failover) []string
	}{
		"force-delete one worker": {
			disrupt: func(t *testing.T, f *failover) []string {
				f.victim = f.workers[0]
				must(t, c.Delete(ctx(), &f.victim, client.GracePeriodSeconds(0)))
				return otherNodes(f.workers, f.victim)
			},
			settled: func(t *testing.T, f *failover) []string {
				var nodes []string
				testutil.Eventually(t, 3*time.Minute, "the Job's replacement worker Running", func() (bool, error) {
					nodes = nil
					for _, p := range runningWorkers(t, f.ns) {
						if p.UID == f.victim.UID {
							return false, nil
						}
						nodes = append(nodes, p.Spec.NodeName)
					}
					return len(nodes) == 4, nil
				})
				return nodes
			},
		},
		"force-delete all daemon pods": {
			disrupt: func(t *testing.T, f *failover) []string {
				for _, p := range f.daemons {
					must(t, c.Delete(ctx(), &p, client.GracePeriodSeconds(0)))
				}
				return otherNodes(f.workers, corev1.Pod{})
			},
			settled: func(t *testing.T, f *failover) []string {
				testutil.Eventually(t, 3*time.Minute, "every daemon pod replaced", func() (bool, error) {
					pods, err := liveDaemons(t, planeA, f.cd)
					if err != nil || len(pods) != len(f.daemons) {
						return false, err
					}
					for node, p := range pods {
						if p.UID == f.daemons[node].UID {
							return false, fmt.Errorf("daemon pod %s on %s not replaced yet", p.Name, node)
						}
					}
					return true, nil
				})
				return otherNodes(f.workers, corev1.Pod{})
			},
		},
		"delete one worker": {
			// The deleted worker stops cleanly (it exits 0 on SIGTERM), so the Job counts it
			// as succeeded and goes on with three, once it has seen the worker finish.
			replaceOnlyFailed: true,
			disrupt: func(t *testing.T, f *failover) []string {
				f.victim = f.workers[0]
				must(t, c.Delete(ctx(), &f.victim))
				return otherNodes(f.workers, f.victim)
			},
			settled: func(t *testing.T, f *failover) []string {
				testutil.Eventually(t, 3*time.Minute, "the deleted worker counted as succeeded", func() (bool, error) {
					j := &batchv1.Job{}
					if err := c.Get(ctx(), client.ObjectKey{Namespace: f.ns, Name: "worker"}, j); err != nil {
						return false, err
					}
					if j.Status.Failed > 0 {
						return false, fmt.Errorf("the Job counts %d failed workers: it will replace the deleted one", j.Status.Failed)
					}
					for _, p := range jobPods(t, f.ns, "worker") {
						if p.UID != f.victim.UID && p.Annotations[batchv1.JobCompletionIndexAnnotation] == f.victim.Annotations[batchv1.JobCompletionIndexAnnotation] {
							return false, fmt.Errorf("the Job replaced the deleted worker %s with %s on %s", f.victim.Name, p.Name, p.Spec.NodeName)
						}
					}
					return j.Status.Succeeded == 1 && len(runningWorkers(t, f.ns)) == 3, nil
				})
				return otherNodes(f.workers, f.victim)
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			waitPlanesIdle(t, planeA)
			f := &failover{ns: namespace(t, planeA)}
			f.cd = computeDomain(t, f.ns, "cd", 4, "")
			job := imexJobObject(t, f.ns, "worker", f.cd, 4, planeRacks(t, planeA)...)
			if tc.replaceOnlyFailed {
				job.Spec.PodReplacementPolicy = ptr.To(batchv1.Failed)
			}
			must(t, c.Create(ctx(), job))
			waitRunning(t, f.ns, "worker", 4, 3*time.Minute)
			f.workers = runningWorkers(t, f.ns)
			before, beforeRVs := waitMembership(t, planeA, f.cd, podNodes(f.workers), 2*time.Minute)
			waitStatus(t, f.cd, cdv1beta1.StatusReady, time.Minute)
			if cl := cliques(t, planeA, f.cd); cl != 2 {
				t.Fatalf("the job spans %d cliques, want 2 racks", cl)
			}
			checkIMEXConnected(t, planeA, f.cd)
			var err error
			f.daemons, err = liveDaemons(t, planeA, f.cd)
			must(t, err)

			survivors := tc.disrupt(t, f)
			nodes := tc.settled(t, f)
			after, afterRVs := waitMembership(t, planeA, f.cd, nodes, 3*time.Minute)
			checkIndexesKept(t, before, after, survivors)
			pods, err := liveDaemons(t, planeA, f.cd)
			must(t, err)
			for node, p := range pods {
				old, ok := f.daemons[node]
				if !ok || old.UID == p.UID {
					continue
				}
				// A replaced daemon: the controller lists its new pod's address, and rewrote
				// the clique after that pod existed.
				if p.Status.PodIP == old.Status.PodIP {
					t.Fatalf("the replacement daemon pod on %s has its predecessor's IP %s: the scenario cannot tell a new status from the old", node, p.Status.PodIP)
				}
				clique := cdv1beta1.CliqueName(string(f.cd.UID), after[node].CliqueID)
				if afterRVs[clique] == beforeRVs[clique] {
					t.Errorf("clique %s has resourceVersion %s as before the daemon on %s was replaced", clique, afterRVs[clique], node)
				}
			}
			if len(nodes) >= 4 {
				waitStatus(t, f.cd, cdv1beta1.StatusReady, time.Minute)
			} else {
				waitStatus(t, f.cd, cdv1beta1.StatusNotReady, time.Minute)
			}
			checkIMEXConnected(t, planeA, f.cd)
			releaseIMEXJob(t, planeA, f.ns, "worker", f.cd)
			waitComplete(t, f.ns, "worker", 3*time.Minute)
			checkIMEXJobLogs(t, f.ns, "worker")
		})
	}
}

// failover is the state of one failover scenario.
type failover struct {
	ns      string
	cd      *cdv1beta1.ComputeDomain
	workers []corev1.Pod          // running before the disruption, by name
	daemons map[string]corev1.Pod // by node, before the disruption
	victim  corev1.Pod
}

// runningWorkers returns the job's Running, Ready pods not being deleted, by name.
func runningWorkers(t *testing.T, ns string) []corev1.Pod {
	t.Helper()
	var out []corev1.Pod
	for _, p := range jobPods(t, ns, "worker") {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && podutils.IsPodReady(&p) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func podNodes(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Spec.NodeName)
	}
	return out
}

// otherNodes returns the nodes of pods other than except.
func otherNodes(pods []corev1.Pod, except corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		if p.UID != except.UID {
			out = append(out, p.Spec.NodeName)
		}
	}
	return out
}
