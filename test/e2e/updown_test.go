package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/lifecycle"
	"cdplane/internal/plane"
	"cdplane/internal/refusal"
	"cdplane/internal/sim"
	"cdplane/internal/status"
	"cdplane/internal/testutil"
	"cdplane/internal/version"
)

// TestUpgradeFromThePreviousReleaseAndBack: the release recorded in hack/releases/previous is
// built from the repository's history (its CLI, with its charts, and its image as the
// simulator runs it, loaded as cdplane:<version>), both planes and the prerequisites are taken
// back to it with its own CLI while no domain exists, and live domains are started on it: a
// 2-rack IMEX job on plane A, a domain on two nodes of plane B. Then, as docs/upgrading.md
// says, this version's CLI upgrades the prerequisites (0.1.0 -> 0.2.0 changes the CRDs'
// schema: the membership lists become atomic, converting the live objects), then plane A, then
// plane B; then the previous release's CLI takes the planes back (the prerequisites stay,
// as the skew policy says). Throughout, both domains are Ready at every read (every half
// second). Along the way: a plane of this version is refused over the previous prerequisites
// (exit 3's refusal); each step runs the version it should (the controllers' image tag);
// every member stays listed; and after going back, a node leaving is removed from the atomic
// status.nodes by the previous release's controller.
func TestUpgradeFromThePreviousReleaseAndBack(t *testing.T) {
	e2eOnly(t)
	waitPlanesIdle(t, planeA, planeB)
	prev, err := sim.PreviousRelease(simState.Repo)
	must(t, err)
	if prev.Version == version.Version {
		t.Fatalf("hack/releases/previous names %s, this version: move it on only once this tree's version moves on", prev.Version)
	}
	dir, err := sim.BuildRelease(ctx(), simState.Repo, prev, testWriter{t})
	must(t, err)
	image := "cdplane:" + prev.Version
	must(t, simState.LoadImage(image, dir))
	previous := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx(), filepath.Join(dir, "cdplane"), append(args, "--kubeconfig", simState.ControlPlane.Kubeconfig)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.Env = append(os.Environ(), plane.EnvVar+"=")
		start := time.Now()
		if err := cmd.Run(); err != nil {
			t.Fatalf("cdplane %s (release %s): %v\n%s", strings.Join(args, " "), prev.Version, err, out.String())
		}
		t.Logf("cdplane %s (release %s): done in %s", strings.Join(args, " "), prev.Version, time.Since(start).Round(time.Second))
	}
	m, err := lifecycle.New(lifecycle.Options{Getter: lifecycle.KubeconfigGetter(simState.ControlPlane.Kubeconfig, ""), Timeout: 3 * time.Minute, Wait: true})
	must(t, err)
	// Whatever happens, the sim is left as it was: this version everywhere.
	t.Cleanup(func() {
		if err := m.ApplyPrerequisites(ctx(), nil, lifecycle.KeepValues); err != nil {
			t.Errorf("restoring the prerequisites: %v", err)
		}
		for _, id := range []string{planeA, planeB} {
			if err := m.ApplyPlane(ctx(), id, simState.PlaneValues(), lifecycle.ResetValues); err != nil {
				t.Errorf("restoring plane %s: %v", id, err)
			}
		}
	})

	// Back to the previous release while no domain exists: planes first, then the
	// prerequisites.
	for _, id := range []string{planeA, planeB} {
		previous("apply", "plane", "--"+plane.FlagName, id, "--set", "image.tag="+prev.Version)
	}
	previous("apply", "prerequisites")
	checkVersions(t, prev.Version, prev.Version)
	checkListType(t, "map")
	err = m.ApplyPlane(ctx(), planeA, simState.PlaneValues(), lifecycle.ResetValues)
	if !refusal.Is(err) {
		t.Fatalf("a plane of %s over the prerequisites of %s: %v, want it refused", version.Version, prev.Version, err)
	}
	t.Logf("refused, as it should be: %v", err)

	// Live domains on the previous release.
	nsA := namespace(t, planeA)
	cdA := computeDomain(t, nsA, "cd", 4, "")
	imexJob(t, nsA, "worker", cdA, 4, planeRacks(t, planeA)...)
	workers := waitRunning(t, nsA, "worker", 4, 3*time.Minute)
	beforeA, _ := waitMembership(t, planeA, cdA, podNodes(workers), 2*time.Minute)
	nsB := namespace(t, planeB)
	cdB := computeDomain(t, nsB, "cd", 2, "")
	nodesB := planeNodes(planeB, rackNumber(t, planeRacks(t, planeB)[0]))[:2]
	var podsB []string
	for i, n := range nodesB {
		podsB = append(podsB, workerPod(t, nsB, fmt.Sprintf("w%d", i), "cd", n).Name)
	}
	waitMembership(t, planeB, cdB, nodesB, 2*time.Minute)
	for _, cd := range []*cdv1beta1.ComputeDomain{cdA, cdB} {
		waitStatus(t, cd, cdv1beta1.StatusReady, 2*time.Minute)
	}
	checkIMEXConnected(t, planeA, cdA)
	wantA, wantB := statusNodes(t, cdA), statusNodes(t, cdB)

	live := sampleReady(t, cdA, cdB)
	// Up: the prerequisites (the CRDs convert under the live domains), then each plane.
	must(t, m.ApplyPrerequisites(ctx(), nil, lifecycle.KeepValues))
	checkListType(t, "atomic")
	checkVersions(t, version.Version, prev.Version)
	for _, id := range []string{planeA, planeB} {
		must(t, m.ApplyPlane(ctx(), id, simState.PlaneValues(), lifecycle.ResetValues))
	}
	checkVersions(t, version.Version, "sim")
	afterA, _ := waitMembership(t, planeA, cdA, podNodes(workers), 2*time.Minute)
	checkIndexesKept(t, beforeA, afterA, podNodes(workers))
	checkIMEXConnected(t, planeA, cdA)
	if got := statusNodes(t, cdA); !slices.Equal(got, wantA) {
		t.Errorf("plane A's domain lists %v after the upgrade, want %v", got, wantA)
	}
	if got := statusNodes(t, cdB); !slices.Equal(got, wantB) {
		t.Errorf("plane B's domain lists %v after the upgrade, want %v", got, wantB)
	}

	// Back: the planes only, with the previous release's CLI.
	for _, id := range []string{planeA, planeB} {
		previous("apply", "plane", "--"+plane.FlagName, id, "--set", "image.tag="+prev.Version)
	}
	checkVersions(t, version.Version, prev.Version)
	checkIMEXConnected(t, planeA, cdA)
	live.check(t, "upgrading from "+prev.Version+" and back", expectedReads(2, time.Since(live.started)))

	// The previous release's controller writes the atomic list whole: a node that leaves is
	// gone from status.nodes.
	deleteAndWait(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: podsB[1]}})
	testutil.Eventually(t, 2*time.Minute, "plane B's domain without the node whose worker left", func() (bool, error) {
		got := statusNodes(t, cdB)
		return slices.Equal(got, []string{nodesB[0]}), fmt.Errorf("status.nodes %v", got)
	})
}

// checkVersions checks the prerequisites release's chart version and the image tag each
// plane's controller runs (status's VERSION column).
func checkVersions(t *testing.T, prerequisites, planes string) {
	t.Helper()
	testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("prerequisites at %s, planes running %s", prerequisites, planes), func() (bool, error) {
		p, err := status.GatherPlanes(ctx(), c, time.Now())
		if err != nil {
			return false, err
		}
		var got []string
		ok := true
		for _, pl := range p.Planes {
			if pl.ID != planeA && pl.ID != planeB {
				continue
			}
			got = append(got, pl.ID+"="+pl.Version)
			ok = ok && pl.Version == planes && pl.Controller.Ready == pl.Controller.Desired
		}
		// The prerequisites' version: the chart label of one of their objects.
		policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		if err := c.Get(ctx(), client.ObjectKey{Name: "compute-domain-status-writers.nvidia.com"}, policy); err != nil {
			return false, err
		}
		chart := policy.Labels["helm.sh/chart"]
		return ok && len(got) == 2 && chart == "cdplane-prerequisites-"+prerequisites, fmt.Errorf("planes %v, prerequisites' chart label %q", got, chart)
	})
}

// checkListType checks the ComputeDomain CRD's status.nodes list type (read unstructured: the
// suite's client does not know the apiextensions types).
func checkListType(t *testing.T, want string) {
	t.Helper()
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	must(t, c.Get(ctx(), client.ObjectKey{Name: "computedomains.resource.nvidia.com"}, crd))
	versions, _, err := unstructured.NestedSlice(crd.Object, "spec", "versions")
	must(t, err)
	if len(versions) == 0 {
		t.Fatal("the ComputeDomain CRD has no versions")
	}
	for _, v := range versions {
		vm, _ := v.(map[string]any)
		got, _, _ := unstructured.NestedString(vm, "schema", "openAPIV3Schema", "properties", "status", "properties", "nodes", "x-kubernetes-list-type")
		if got != want {
			t.Errorf("CRD version %v: status.nodes is a %q list, want %q", vm["name"], got, want)
		}
	}
}

// statusNodes is the sorted node names of a domain's status.nodes.
func statusNodes(t *testing.T, cd *cdv1beta1.ComputeDomain) []string {
	t.Helper()
	var names []string
	for _, n := range getCD(t, cd).Status.Nodes {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	return names
}

// testWriter writes a build's output to the test log, line by line.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Log(line)
	}
	return len(p), nil
}
