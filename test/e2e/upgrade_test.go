package e2e

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/daemonenv"
	"cdplane/internal/lifecycle"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
)

// TestStagedUpgradeWithLiveDomains: `cdplane apply plane` with a changed daemon setting (the
// daemons' log verbosity: on the simulated cluster every image is the same build, so a changed
// setting stands for a new version) while a 2-rack domain of that plane runs a job and a domain
// of the other plane runs too. Plane A is upgraded, then downgraded, then plane B is upgraded
// and restored: a staged upgrade, plane by plane. Throughout, both domains are Ready (sampled
// every half second, a minimum of successful reads required). The upgraded plane's live
// DaemonSet moves to the new template at once, and under the default policy (OnDelete) its running daemons are not restarted: the job completes
// on them, and the daemons of the domain's next job run the new setting. The other plane's
// DaemonSet is not written at all (same generation, metadata and field managers' entries; the
// DaemonSet controller's status updates are not writes of cdplane's).
func TestStagedUpgradeWithLiveDomains(t *testing.T) {
	e2eOnly(t)
	waitPlanesIdle(t, planeA, planeB)
	m, err := lifecycle.New(lifecycle.Options{Getter: lifecycle.KubeconfigGetter(simState.ControlPlane.Kubeconfig, ""), Timeout: 3 * time.Minute, Wait: true})
	must(t, err)
	for _, id := range []string{planeA, planeB} {
		t.Cleanup(func() {
			if err := m.ApplyPlane(ctx(), id, simState.PlaneValues(), lifecycle.ResetValues); err != nil {
				t.Errorf("restoring plane %s: %v", id, err)
			}
		})
	}

	// Plane A: a 2-rack job; plane B: a domain on two nodes of one rack.
	nsA := namespace(t, planeA)
	cdA := computeDomain(t, nsA, "cd", 4, "")
	imexJob(t, nsA, "worker", cdA, 4, planeRacks(t, planeA)...)
	waitRunning(t, nsA, "worker", 4, 3*time.Minute)
	workers := runningWorkers(t, nsA)
	beforeA, _ := waitMembership(t, planeA, cdA, podNodes(workers), 2*time.Minute)
	nsB := namespace(t, planeB)
	cdB := computeDomain(t, nsB, "cd", 2, "")
	nodesB := planeNodes(planeB, rackNumber(t, planeRacks(t, planeB)[0]))[:2]
	for i, n := range nodesB {
		workerPod(t, nsB, fmt.Sprintf("w%d", i), "cd", n)
	}
	waitMembership(t, planeB, cdB, nodesB, 2*time.Minute)
	for _, cd := range []*cdv1beta1.ComputeDomain{cdA, cdB} {
		waitStatus(t, cd, cdv1beta1.StatusReady, time.Minute)
	}
	checkIMEXConnected(t, planeA, cdA)
	daemonsA, err := liveDaemons(t, planeA, cdA)
	must(t, err)
	daemonsB, err := liveDaemons(t, planeB, cdB)
	must(t, err)
	before := map[string]string{planeA: daemonVerbosity(t, planeA, cdA), planeB: daemonVerbosity(t, planeB, cdB)}

	// The live domains Ready throughout, sampled until the end of the scenario (plane A's
	// between its jobs excepted: a domain without workload is NotReady by design).
	live := sampleReady(t, cdA, cdB)

	// upgrade applies plane id with the daemons' verbosity v and checks the live domain of that
	// plane moved to it without a daemon restart, and the other plane's was not written.
	upgrade := func(id string, cd *cdv1beta1.ComputeDomain, daemons map[string]corev1.Pod, v string, other string, otherCD *cdv1beta1.ComputeDomain) {
		t.Helper()
		otherDS := domainDaemonSet(t, other, otherCD)
		vals := simState.PlaneValues()
		if v != "" {
			vals["daemon"] = map[string]any{"logVerbosity": v}
		}
		must(t, m.ApplyPlane(ctx(), id, vals, lifecycle.ResetValues))
		want := v
		if want == "" {
			want = before[id]
		}
		testutil.Eventually(t, 3*time.Minute, fmt.Sprintf("plane %s: the live domain's DaemonSet at daemon verbosity %s", id, want), func() (bool, error) {
			return daemonVerbosity(t, id, cd) == want, nil
		})
		checkDaemonsKept(t, id, cd, daemons)
		if ds := domainDaemonSet(t, other, otherCD); !reflect.DeepEqual(objectWrites(ds), objectWrites(otherDS)) {
			t.Errorf("plane %s's DaemonSet %s was written while plane %s was upgraded:\nbefore %+v\nafter  %+v", other, ds.Name, id, objectWrites(otherDS), objectWrites(ds))
		}
	}
	upgrade(planeA, cdA, daemonsA, "3", planeB, cdB)
	afterA, _ := waitMembership(t, planeA, cdA, podNodes(workers), 2*time.Minute)
	checkIndexesKept(t, beforeA, afterA, podNodes(workers))
	checkIMEXConnected(t, planeA, cdA)
	// The job completes on the daemons it started with; they go with it.
	releaseIMEXJob(t, planeA, nsA, "worker", cdA)
	live.set(cdB)
	waitComplete(t, nsA, "worker", 3*time.Minute)
	checkIMEXJobLogs(t, nsA, "worker")
	testutil.Eventually(t, 2*time.Minute, "the finished job's daemons gone", func() (bool, error) {
		pods, err := liveDaemons(t, planeA, cdA)
		return err == nil && len(pods) == 0, err
	})
	// The domain's next job runs daemons of the new template.
	imexJob(t, nsA, "next", cdA, 4, planeRacks(t, planeA)...)
	next := waitRunning(t, nsA, "next", 4, 3*time.Minute)
	waitMembership(t, planeA, cdA, podNodes(next), 3*time.Minute)
	waitStatus(t, cdA, cdv1beta1.StatusReady, time.Minute)
	live.set(cdA, cdB)
	nextDaemons, err := liveDaemons(t, planeA, cdA)
	must(t, err)
	for node, p := range nextDaemons {
		if v := podEnv(&p, daemonenv.LogVerbosity); v != "3" {
			t.Errorf("the next job's daemon on %s runs verbosity %q, want the upgraded 3", node, v)
		}
	}
	// Downgrade plane A: back to the sim's values.
	upgrade(planeA, cdA, nextDaemons, "", planeB, cdB)
	// Then plane B, with plane A's domain live; and back.
	upgrade(planeB, cdB, daemonsB, "3", planeA, cdA)
	upgrade(planeB, cdB, daemonsB, "", planeA, cdA)

	live.check(t, "during the staged upgrade", expectedReads(2, time.Since(live.started)))
}

// writes is what a write to an object's metadata or spec changes: its generation, labels and
// annotations, and each field manager's entry for the object itself (its time moves with every
// change that manager makes). Status writes are left out: the DaemonSet controller updates a
// DaemonSet's status whenever its pods change or it catches up with an earlier template change,
// which on a loaded machine can come seconds late, and that is not a write by cdplane.
type writes struct {
	Generation  int64
	Labels      map[string]string
	Annotations map[string]string
	Managers    []string
}

func objectWrites(o client.Object) writes {
	w := writes{Generation: o.GetGeneration(), Labels: o.GetLabels(), Annotations: o.GetAnnotations()}
	for _, m := range o.GetManagedFields() {
		if m.Subresource != "" {
			continue
		}
		at := ""
		if m.Time != nil {
			at = m.Time.UTC().Format(time.RFC3339)
		}
		w.Managers = append(w.Managers, fmt.Sprintf("%s %s %s %s", m.Manager, m.Operation, at, m.FieldsV1.GetRawString()))
	}
	return w
}

// domainDaemonSet returns the daemon DaemonSet of a domain.
func domainDaemonSet(t *testing.T, id string, cd *cdv1beta1.ComputeDomain) *appsv1.DaemonSet {
	t.Helper()
	list := &appsv1.DaemonSetList{}
	must(t, c.List(ctx(), list, client.InNamespace(plane.Name(id, plane.DriverNamespaceLegacyName)),
		client.MatchingLabels{cdv1beta1.ComputeDomainLabel: string(cd.UID)}))
	if len(list.Items) != 1 {
		t.Fatalf("domain %s/%s has %d DaemonSets, want 1", cd.Namespace, cd.Name, len(list.Items))
	}
	return &list.Items[0]
}

// daemonVerbosity is the daemons' log verbosity in the domain's DaemonSet template.
func daemonVerbosity(t *testing.T, id string, cd *cdv1beta1.ComputeDomain) string {
	t.Helper()
	ds := domainDaemonSet(t, id, cd)
	return envOf(ds.Spec.Template.Spec.Containers, daemonenv.LogVerbosity)
}

func podEnv(p *corev1.Pod, name string) string { return envOf(p.Spec.Containers, name) }

func envOf(ctrs []corev1.Container, name string) string {
	for _, ctr := range ctrs {
		if i := slices.IndexFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == name }); i >= 0 {
			return ctr.Env[i].Value
		}
	}
	return ""
}
