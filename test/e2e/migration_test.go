package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/kubectl/pkg/util/podutils"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/lifecycle"
	"cdplane/internal/plane"
	"cdplane/internal/sim/imexsim"
	"cdplane/internal/testutil"
)

// legacyPlane is the legacy plane's id: none.
const legacyPlane = ""

// From the legacy plane to a named plane, as an operator does it with the cdplane CLI (the
// sim's own cdplane binary, run against the simulated cluster). The sim has no legacy plane, so
// the scenario makes one: it unassigns one rack of plane B (3 nodes), which are then the only
// nodes without a plane label, installs the legacy plane there, and runs a live legacy domain on
// two of them in an unassigned namespace. Then the migration:
//   - assigning the namespace, or a node serving the live domain, to plane B is refused, naming
//     the domain, and changes nothing;
//   - the idle third node is assigned: the legacy kubelet plugin leaves it, plane B's arrives
//     and takes over the node's ResourceSlices (every device then carries plane B), while the
//     live domain stays Ready on its two nodes with the same daemons;
//   - the job ends, the domain is deleted and its daemons, node labels and templates go; the
//     namespace and the two nodes are assigned to plane B; a new domain in the namespace runs on
//     plane B, Ready with its IMEX connected, and nothing of the legacy plane is left there;
//   - the legacy plane is destroyed last.
//
// The rack ends back in plane B, as the sim started (the cleanup restores it on failure too).
func TestMigrateLegacyPlaneToNamedPlane(t *testing.T) {
	e2eOnly(t)
	clock := newStepClock(t)
	waitPlanesIdle(t, planeB)
	racks := planeRacks(t, planeB)
	moved := planeNodes(planeB, rackNumber(t, racks[len(racks)-1]))
	if len(moved) != 3 {
		t.Fatalf("rack %s of plane %s has nodes %v, want 3", racks[len(racks)-1], planeB, moved)
	}
	n0, n1, n2 := moved[0], moved[1], moved[2]
	ns := fmt.Sprintf("migrate-legacy-%d", time.Now().UnixNano()%100000)
	t.Cleanup(func() { restoreMigratedRack(t, ns, moved) })
	clock.step("plane " + planeB + " idle")

	// A legacy plane on one rack of plane B.
	for _, n := range moved {
		out := cdplaneOK(t, "unassign", "node", n, "--control-plane-id", planeB)
		wantOutput(t, out, fmt.Sprintf("node %s unassigned from control plane %q", n, planeB))
		setSimPlane(t, n, legacyPlane)
	}
	checkUnlabelledNodes(t, moved)
	must(t, c.Create(ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	values := filepath.Join(t.TempDir(), "values.yaml")
	data, err := json.Marshal(simState.PlaneValues())
	must(t, err)
	must(t, os.WriteFile(values, data, 0o600))
	out := cdplaneOK(t, "install", "plane", "--control-plane-id=", "-f", values, "--timeout", "3m")
	wantOutput(t, out, "is installed")
	waitPlanesIdle(t, legacyPlane)
	waitPluginNodes(t, legacyPlane, moved)
	for _, n := range moved {
		// Plane B's plugin left its slices; the legacy plugin takes them over.
		waitSlicesOf(t, n, legacyPlane)
	}
	clock.step("rack " + racks[len(racks)-1] + " unassigned from " + planeB + ", legacy plane installed on it")

	// A live legacy domain on two of the nodes, in a namespace of no plane.
	cd := computeDomain(t, ns, "legacy", 2, "")
	workerPod(t, ns, "w0", "legacy", n0)
	workerPod(t, ns, "w1", "legacy", n1)
	before, _ := waitMembership(t, legacyPlane, cd, []string{n0, n1}, 3*time.Minute)
	waitStatus(t, cd, cdv1beta1.StatusReady, time.Minute)
	checkIMEXConnected(t, legacyPlane, cd)
	if v, ok := getCD(t, cd).Labels[cdv1beta1.ControlPlaneLabel]; ok {
		t.Fatalf("the legacy domain carries plane label %q", v)
	}
	daemons, err := liveDaemons(t, legacyPlane, cd)
	must(t, err)
	clock.step("legacy domain Ready on " + n0 + ", " + n1)

	// (a) The namespace holding the live domain is refused, naming it; nothing changes.
	liveDomain := fmt.Sprintf("%s/legacy (the legacy plane (no label))", ns)
	out = cdplaneRefused(t, "assign", "namespace", ns, "--control-plane-id", planeB)
	wantOutput(t, out, fmt.Sprintf("assign refused: namespace %s: holds live ComputeDomains of other control planes: %s", ns, liveDomain))
	checkNamespaceUnassigned(t, ns)
	// (b) So is a node serving it.
	out = cdplaneRefused(t, "assign", "node", n0, "--control-plane-id", planeB)
	wantOutput(t, out, fmt.Sprintf("assign refused: node %s: serves live ComputeDomains of other control planes: %s", n0, liveDomain))
	checkNodeUnassigned(t, n0, cd)
	clock.step("namespace and serving node refused")

	// (c) The idle node moves: the legacy plugin leaves it, plane B's arrives and takes over its
	// ResourceSlices; the live domain carries on.
	out = cdplaneOK(t, "assign", "node", n2, "--control-plane-id", planeB)
	wantOutput(t, out, fmt.Sprintf("node %s assigned to control plane %q", n2, planeB))
	setSimPlane(t, n2, planeB)
	waitPluginNodes(t, legacyPlane, []string{n0, n1})
	waitPluginNodes(t, planeB, planeNodes(planeB, -1))
	waitSlicesOf(t, n2, planeB)
	after, _ := waitMembership(t, legacyPlane, cd, []string{n0, n1}, time.Minute)
	checkIndexesKept(t, before, after, []string{n0, n1})
	waitStatus(t, cd, cdv1beta1.StatusReady, time.Minute)
	checkDaemonsKept(t, legacyPlane, cd, daemons)
	checkIMEXConnected(t, legacyPlane, cd)
	clock.step("idle node " + n2 + " moved to " + planeB)

	// (d) The job ends and the domain goes; then the namespace and its nodes move.
	for _, w := range []string{"w0", "w1"} {
		deleteAndWait(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: w}})
	}
	deleteAndWait(t, cd)
	waitLegacyDomainGone(t, ns, cd, []string{n0, n1})
	clock.step("job ended, legacy domain deleted and cleaned up")
	out = cdplaneOK(t, "assign", "namespace", ns, "--control-plane-id", planeB)
	wantOutput(t, out, fmt.Sprintf("namespace %s assigned to control plane %q", ns, planeB))
	for _, n := range []string{n0, n1} {
		out = cdplaneOK(t, "assign", "node", n, "--control-plane-id", planeB)
		wantOutput(t, out, fmt.Sprintf("node %s assigned to control plane %q", n, planeB))
		setSimPlane(t, n, planeB)
	}
	waitPluginNodes(t, legacyPlane, nil)
	waitPlanesIdle(t, planeB)
	for _, n := range moved {
		waitSlicesOf(t, n, planeB)
	}
	checkNamespaceOf(t, ns, planeB)
	checkNodesRecorded(t, moved, planeB)
	clock.step("namespace and nodes " + n0 + ", " + n1 + " moved to " + planeB)

	// A new domain in the namespace runs on plane B, on the moved nodes.
	fresh := computeDomain(t, ns, "after", 2, "")
	testutil.Eventually(t, time.Minute, "the new domain labelled for plane "+planeB, func() (bool, error) {
		return getCD(t, fresh).Labels[cdv1beta1.ControlPlaneLabel] == planeB, nil
	})
	a0 := workerPod(t, ns, "a0", "after", n0)
	a1 := workerPod(t, ns, "a1", "after", n1)
	waitMembership(t, planeB, fresh, []string{n0, n1}, 3*time.Minute)
	waitStatus(t, fresh, cdv1beta1.StatusReady, time.Minute)
	checkIMEXConnected(t, planeB, fresh)
	if pods := daemonPods(t, legacyPlane, fresh); len(pods) != 0 {
		t.Errorf("the legacy plane runs %d daemon pods for plane %s's domain", len(pods), planeB)
	}
	deleteAndWait(t, a0)
	deleteAndWait(t, a1)
	deleteAndWait(t, fresh)
	clock.step("new domain Ready on plane " + planeB + " and deleted")

	// The legacy plane goes last.
	out = cdplaneOK(t, "destroy", "plane", "--control-plane-id=", "--timeout", "3m")
	wantOutput(t, out, "is destroyed")
	err = c.Get(ctx(), client.ObjectKey{Name: plane.DriverNamespaceLegacyName}, &corev1.Namespace{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s after the legacy plane was destroyed: %v", plane.DriverNamespaceLegacyName, err)
	}
	waitPlanesIdle(t, planeB)
	checkUnlabelledNodes(t, nil)
	clock.step("legacy plane destroyed")
}

// restoreMigratedRack gives the rack back to plane B whatever state the scenario left: its
// workloads and domains go first (while both planes run to finalize them), then the nodes are
// assigned to plane B, the legacy plane is destroyed if anything of it is left, and the
// namespace is deleted. Each failure is reported and the next step still runs.
func restoreMigratedRack(t *testing.T, ns string, nodes []string) {
	bg := context.Background()
	if t.Failed() {
		dump(t, ns, legacyPlane)
		dump(t, ns, planeB)
		dumpPlaneLogs(t, legacyPlane, nodes)
		dumpPlaneLogs(t, planeB, nodes)
		dumpIMEX(t, ns, nodes)
	}
	if err := c.DeleteAllOf(bg, &corev1.Pod{}, client.InNamespace(ns)); client.IgnoreNotFound(err) != nil {
		t.Errorf("cleanup: deleting the pods of %s: %v", ns, err)
	}
	if err := c.DeleteAllOf(bg, &cdv1beta1.ComputeDomain{}, client.InNamespace(ns)); client.IgnoreNotFound(err) != nil {
		t.Errorf("cleanup: deleting the ComputeDomains of %s: %v", ns, err)
	}
	if err := wait.PollUntilContextTimeout(bg, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		cds := &cdv1beta1.ComputeDomainList{}
		err := c.List(ctx, cds, client.InNamespace(ns))
		return err == nil && len(cds.Items) == 0, nil
	}); err != nil {
		t.Errorf("cleanup: the ComputeDomains of %s not gone 3m after their deletion", ns)
	}
	for _, n := range nodes {
		setSimPlane(t, n, planeB)
		if _, err := lifecycle.Assign(bg, c, planeB, lifecycle.Target{Kind: lifecycle.KindNode, Name: n}); err != nil {
			t.Errorf("cleanup: assigning node %s back to plane %s: %v", n, planeB, err)
		}
	}
	var log bytes.Buffer
	m, err := lifecycle.New(lifecycle.Options{Getter: lifecycle.KubeconfigGetter(simState.ControlPlane.Kubeconfig, ""), Timeout: 3 * time.Minute, Out: &log})
	if err == nil {
		err = m.DestroyPlane(bg, legacyPlane, false)
		if err != nil && strings.Contains(err.Error(), "is not installed") {
			err = nil
		} else if log.Len() > 0 {
			t.Logf("cleanup: destroying the legacy plane:\n%s", log.String())
		}
	}
	if err != nil {
		t.Errorf("cleanup: destroying the legacy plane: %v", err)
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := c.Delete(bg, nsObj); client.IgnoreNotFound(err) != nil {
		t.Errorf("cleanup: deleting namespace %s: %v", ns, err)
		return
	}
	if err := wait.PollUntilContextTimeout(bg, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(nsObj), &corev1.Namespace{})), nil
	}); err != nil {
		t.Errorf("cleanup: namespace %s not gone 3m after its deletion", ns)
	}
}

// dumpPlaneLogs logs the end of the logs of plane id's controllers, and of its other pods on
// nodes (kubelet plugins, daemons).
func dumpPlaneLogs(t *testing.T, id string, nodes []string) {
	pods := &corev1.PodList{}
	if err := c.List(ctx(), pods, client.InNamespace(plane.Name(id, plane.DriverNamespaceLegacyName))); err != nil {
		t.Logf("listing the pods of plane %q: %v", id, err)
		return
	}
	for i, p := range pods.Items {
		if p.Labels["app.kubernetes.io/name"] == "cdplane-controller" || slices.Contains(nodes, p.Spec.NodeName) {
			t.Logf("pod %s/%s on %s, log tail:\n%s", p.Namespace, p.Name, p.Spec.NodeName, logTail(&pods.Items[i], 40))
		}
	}
}

// dumpIMEX logs what the simulated IMEX of each domain in ns reports on nodes, where the
// kubelet plugin's paths on the node are known already.
func dumpIMEX(t *testing.T, ns string, nodes []string) {
	cds := &cdv1beta1.ComputeDomainList{}
	if err := c.List(ctx(), cds, client.InNamespace(ns)); err != nil {
		return
	}
	for _, cd := range cds.Items {
		for _, n := range nodes {
			pluginPathsMu.Lock()
			dir, ok := pluginPaths[n+" --state-dir"]
			pluginPathsMu.Unlock()
			if !ok {
				continue
			}
			qctx, cancel := context.WithTimeout(ctx(), 5*time.Second)
			st, err := imexsim.Query(qctx, filepath.Join(dir, "domains", string(cd.UID), "imexd.cfg"))
			cancel()
			t.Logf("IMEX of domain %s on %s: %+v (%v)", cd.Name, n, st, err)
		}
	}
}

// setSimPlane records that node now belongs to plane id, for the helpers that find a plane's
// nodes (planeNodes, planeOf, waitPlanesIdle).
func setSimPlane(t *testing.T, node, id string) {
	t.Helper()
	for i := range simState.Nodes {
		if simState.Nodes[i].Name == node {
			simState.Nodes[i].Plane = id
			return
		}
	}
	t.Fatalf("no simulated node %s", node)
}

// cdplaneCLI runs the sim's cdplane binary against the simulated cluster, as an operator does, and
// returns what it printed (stdout and stderr) and its exit code. The test's environment gives
// it no plane id.
func cdplaneCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, filepath.Join(simState.BinDir, "cdplane"), args...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "KUBECONFIG=") && !strings.HasPrefix(e, plane.EnvVar+"=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, "KUBECONFIG="+simState.ControlPlane.Kubeconfig)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("running cdplane %s: %v", strings.Join(args, " "), err)
	}
	t.Logf("$ cdplane %s   # exit %d, %s\n%s", strings.Join(args, " "), code, time.Since(start).Round(10*time.Millisecond), out)
	return string(out), code
}

// cdplaneOK runs cdplane and fails the test unless it exits 0.
func cdplaneOK(t *testing.T, args ...string) string {
	t.Helper()
	out, code := cdplaneCLI(t, args...)
	if code != 0 {
		t.Fatalf("cdplane %s exited %d:\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// cdplaneRefused runs cdplane and fails the test unless it exits 3, a safety check's refusal
// (docs/cli.md, "Exit codes").
func cdplaneRefused(t *testing.T, args ...string) string {
	t.Helper()
	out, code := cdplaneCLI(t, args...)
	if code != 3 {
		t.Fatalf("cdplane %s exited %d, want 3 (refused):\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

func wantOutput(t *testing.T, out, want string) {
	t.Helper()
	if !strings.Contains(out, want) {
		t.Fatalf("the command printed:\n%s\nwant a line containing %q", out, want)
	}
}

// checkUnlabelledNodes asserts that exactly nodes carry no plane label: the legacy plane's
// kubelet plugin runs on GPU nodes without one, so these are the only nodes it may serve.
func checkUnlabelledNodes(t *testing.T, nodes []string) {
	t.Helper()
	list := &corev1.NodeList{}
	must(t, c.List(ctx(), list))
	var got []string
	for _, n := range list.Items {
		if _, ok := n.Labels[cdv1beta1.ControlPlaneLabel]; !ok {
			got = append(got, n.Name)
		}
	}
	want := slices.Clone(nodes)
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Fatalf("nodes without a plane label: %v, want %v", got, want)
	}
}

// waitPluginNodes waits until plane id's kubelet plugin DaemonSet wants exactly nodes, and its
// pods run Ready there and nowhere else (none terminating either).
func waitPluginNodes(t *testing.T, id string, nodes []string) {
	t.Helper()
	driverNS := plane.Name(id, plane.DriverNamespaceLegacyName)
	want := slices.Clone(nodes)
	sort.Strings(want)
	testutil.Eventually(t, 3*time.Minute, fmt.Sprintf("the kubelet plugin of plane %q on exactly %v", id, want), func() (bool, error) {
		ds := &appsv1.DaemonSet{}
		if err := c.Get(ctx(), client.ObjectKey{Namespace: driverNS, Name: plane.Name(id, "cdplane-kubelet-plugin")}, ds); err != nil {
			return false, err
		}
		if int(ds.Status.DesiredNumberScheduled) != len(want) {
			return false, fmt.Errorf("the DaemonSet wants %d nodes", ds.Status.DesiredNumberScheduled)
		}
		pods := &corev1.PodList{}
		if err := c.List(ctx(), pods, client.InNamespace(driverNS), client.MatchingLabels{"app.kubernetes.io/name": "cdplane-kubelet-plugin"}); err != nil {
			return false, err
		}
		got := []string{}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || !podutils.IsPodReady(&p) {
				return false, fmt.Errorf("plugin pod %s on %s not Ready or terminating", p.Name, p.Spec.NodeName)
			}
			got = append(got, p.Spec.NodeName)
		}
		sort.Strings(got)
		if !slices.Equal(got, want) {
			return false, fmt.Errorf("plugin pods on %v", got)
		}
		return true, nil
	})
}

// slicePlanes counts the devices that node's ResourceSlices of cdplane's driver publish, by
// their controlPlane attribute ("<none>" for a device without one).
func slicePlanes(node string) (map[string]int, error) {
	list := &resourcev1.ResourceSliceList{}
	if err := c.List(ctx(), list, client.MatchingFields{
		resourcev1.ResourceSliceSelectorNodeName: node, resourcev1.ResourceSliceSelectorDriver: cdv1beta1.DriverName,
	}); err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			a, ok := d.Attributes[kubeletplugin.AttributeControlPlane]
			if !ok {
				a, ok = d.Attributes[resourcev1.QualifiedName(cdv1beta1.DriverName+"/"+kubeletplugin.AttributeControlPlane)]
			}
			v := "<none>"
			if ok && a.StringValue != nil {
				v = *a.StringValue
			}
			out[v]++
		}
	}
	return out, nil
}

// waitSlicesOf waits until every device node's ResourceSlices publish is plane id's: what
// another plane's plugin published there before is gone or taken over.
func waitSlicesOf(t *testing.T, node, id string) {
	t.Helper()
	testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("node %s's ResourceSlices all of plane %q", node, id), func() (bool, error) {
		got, err := slicePlanes(node)
		if err != nil {
			return false, err
		}
		if len(got) != 1 || got[id] == 0 {
			return false, fmt.Errorf("devices by controlPlane: %v", got)
		}
		return true, nil
	})
}

// checkNamespaceUnassigned asserts that a refused assignment left the namespace as it was: no
// plane label, no RoleBinding.
func checkNamespaceUnassigned(t *testing.T, ns string) {
	t.Helper()
	obj := &corev1.Namespace{}
	must(t, c.Get(ctx(), client.ObjectKey{Name: ns}, obj))
	if v, ok := obj.Labels[cdv1beta1.ControlPlaneLabel]; ok {
		t.Errorf("after the refusal namespace %s carries plane label %q", ns, v)
	}
	rbs := &rbacv1.RoleBindingList{}
	must(t, c.List(ctx(), rbs, client.InNamespace(ns)))
	for _, rb := range rbs.Items {
		t.Errorf("after the refusal namespace %s holds RoleBinding %s", ns, rb.Name)
	}
}

// checkNodeUnassigned asserts that a refused assignment left the node as it was: no plane
// label, still serving the domain, and no assignment recorded.
func checkNodeUnassigned(t *testing.T, node string, cd *cdv1beta1.ComputeDomain) {
	t.Helper()
	obj := &corev1.Node{}
	must(t, c.Get(ctx(), client.ObjectKey{Name: node}, obj))
	if v, ok := obj.Labels[cdv1beta1.ControlPlaneLabel]; ok {
		t.Errorf("after the refusal node %s carries plane label %q", node, v)
	}
	if !nodeHasDomainLabel(t, node, cd) {
		t.Errorf("after the refusal node %s no longer serves domain %s", node, cd.Name)
	}
	recorded, err := lifecycle.NodeAssignments(ctx(), c)
	must(t, err)
	if id, ok := recorded[node]; ok {
		t.Errorf("after the refusal node %s is recorded for plane %q", node, id)
	}
}

// waitLegacyDomainGone waits until nothing of a deleted legacy domain is left: no daemon pod,
// DaemonSet, claim template or clique in the legacy driver namespace, no node label, no claim
// template in its namespace, and no config directory on its nodes.
func waitLegacyDomainGone(t *testing.T, ns string, cd *cdv1beta1.ComputeDomain, nodes []string) {
	t.Helper()
	driverNS := plane.Name(legacyPlane, plane.DriverNamespaceLegacyName)
	byUID := client.MatchingLabels{cdv1beta1.ComputeDomainLabel: string(cd.UID)}
	testutil.Eventually(t, 2*time.Minute, "nothing left of the legacy domain", func() (bool, error) {
		for what, l := range map[string]struct {
			list client.ObjectList
			opts []client.ListOption
		}{
			"daemon pods":                      {&corev1.PodList{}, []client.ListOption{client.InNamespace(driverNS), byUID}},
			"daemon DaemonSets":                {&appsv1.DaemonSetList{}, []client.ListOption{client.InNamespace(driverNS), byUID}},
			"daemon claim templates":           {&resourcev1.ResourceClaimTemplateList{}, []client.ListOption{client.InNamespace(driverNS), byUID}},
			"cliques":                          {&cdv1beta1.ComputeDomainCliqueList{}, []client.ListOption{client.InNamespace(driverNS), byUID}},
			"nodes with its domain label":      {&corev1.NodeList{}, []client.ListOption{byUID}},
			"claim templates in the namespace": {&resourcev1.ResourceClaimTemplateList{}, []client.ListOption{client.InNamespace(ns)}},
			"claims in the namespace":          {&resourcev1.ResourceClaimList{}, []client.ListOption{client.InNamespace(ns)}},
			"RoleBindings in the namespace":    {&rbacv1.RoleBindingList{}, []client.ListOption{client.InNamespace(ns)}},
		} {
			if err := c.List(ctx(), l.list, l.opts...); err != nil {
				return false, err
			}
			if n := meta.LenList(l.list); n > 0 {
				return false, fmt.Errorf("%d %s", n, what)
			}
		}
		for _, n := range nodes {
			dir := filepath.Dir(imexConfigPath(t, n, string(cd.UID)))
			switch _, err := os.Stat(dir); {
			case err == nil:
				return false, fmt.Errorf("config directory %s on %s still there", dir, n)
			case !errors.Is(err, os.ErrNotExist):
				return false, fmt.Errorf("config directory %s on %s: %w", dir, n, err)
			}
		}
		return true, nil
	})
}

// checkNamespaceOf asserts that namespace ns is plane id's: its label, and exactly the plane's
// RoleBindings (the legacy plane binds cluster-wide and leaves none).
func checkNamespaceOf(t *testing.T, ns, id string) {
	t.Helper()
	obj := &corev1.Namespace{}
	must(t, c.Get(ctx(), client.ObjectKey{Name: ns}, obj))
	if v := obj.Labels[cdv1beta1.ControlPlaneLabel]; v != id {
		t.Errorf("namespace %s carries plane label %q, want %q", ns, v, id)
	}
	var want, got []string
	for _, rb := range lifecycle.RoleBindings(id, ns) {
		want = append(want, rb.Name)
	}
	rbs := &rbacv1.RoleBindingList{}
	must(t, c.List(ctx(), rbs, client.InNamespace(ns)))
	for _, rb := range rbs.Items {
		got = append(got, rb.Name)
	}
	sort.Strings(want)
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Errorf("RoleBindings in namespace %s: %v, want %v", ns, got, want)
	}
}

// checkNodesRecorded asserts that each node carries plane id's label, no domain label, and is
// recorded for the plane.
func checkNodesRecorded(t *testing.T, nodes []string, id string) {
	t.Helper()
	recorded, err := lifecycle.NodeAssignments(ctx(), c)
	must(t, err)
	for _, n := range nodes {
		obj := &corev1.Node{}
		must(t, c.Get(ctx(), client.ObjectKey{Name: n}, obj))
		if v := obj.Labels[cdv1beta1.ControlPlaneLabel]; v != id {
			t.Errorf("node %s carries plane label %q, want %q", n, v, id)
		}
		if v, ok := obj.Labels[cdv1beta1.ComputeDomainLabel]; ok {
			t.Errorf("node %s still carries domain label %q", n, v)
		}
		if recorded[n] != id {
			t.Errorf("node %s is recorded for plane %q, want %q", n, recorded[n], id)
		}
	}
}

// stepClock logs how long each step of a scenario took.
type stepClock struct {
	t           *testing.T
	start, last time.Time
}

func newStepClock(t *testing.T) *stepClock {
	now := time.Now()
	return &stepClock{t: t, start: now, last: now}
}

func (s *stepClock) step(what string) {
	s.t.Helper()
	now := time.Now()
	s.t.Logf("STEP %s: %s (at %s)", what, now.Sub(s.last).Round(100*time.Millisecond), now.Sub(s.start).Round(100*time.Millisecond))
	s.last = now
}
