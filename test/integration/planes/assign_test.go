package planes

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/cli"
	"cdplane/internal/controller/secretmirror"
	"cdplane/internal/lifecycle"
	"cdplane/internal/testutil"
)

var (
	adminKubeconfigOnce sync.Once
	adminKubeconfig     string
	adminKubeconfigErr  error
	nodeSeq             atomic.Int32
)

// runCLI runs `cdplane args... --kubeconfig <admin>` and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	adminKubeconfigOnce.Do(func() {
		addUserMu.Lock()
		defer addUserMu.Unlock()
		adminKubeconfig, adminKubeconfigErr = testCluster.AdminKubeconfig("planes-admin")
	})
	if adminKubeconfigErr != nil {
		t.Fatal(adminKubeconfigErr)
	}
	var out bytes.Buffer
	code := cli.Main(append(args, "--kubeconfig", adminKubeconfig), &out, &out)
	t.Logf("cdplane %s: exit %d\n%s", strings.Join(args, " "), code, out.String())
	return code, out.String()
}

// mustCLI runs the CLI and fails the test unless it exits 0 with every want in its output.
func mustCLI(t *testing.T, want []string, args ...string) {
	t.Helper()
	code, out := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("cdplane %s: exit %d:\n%s", strings.Join(args, " "), code, out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("cdplane %s: output lacks %q:\n%s", strings.Join(args, " "), w, out)
		}
	}
}

// refusedCLI runs the CLI and fails the test unless it exits 3 (refused by a safety check)
// naming every want.
func refusedCLI(t *testing.T, want []string, args ...string) {
	t.Helper()
	code, out := runCLI(t, args...)
	if code != 3 || !strings.Contains(out, "refused") {
		t.Fatalf("cdplane %s: exit %d, want a refusal:\n%s", strings.Join(args, " "), code, out)
	}
	if n := strings.Count(out, "refused:"); n != 1 {
		t.Errorf("cdplane %s says refused %d times, want once:\n%s", strings.Join(args, " "), n, out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("cdplane %s: refusal does not name %q:\n%s", strings.Join(args, " "), w, out)
		}
	}
}

// newNode creates a Node (no kubelet: only the object) and deletes it when the test ends.
func newNode(t *testing.T, labels map[string]string) string {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("planes-node-%d", nodeSeq.Add(1)), Labels: labels}}
	if err := testCluster.Client.Create(testContext(t), n); err != nil {
		t.Fatalf("creating node: %v", err)
	}
	t.Cleanup(func() { _ = testCluster.Client.Delete(context.Background(), n) })
	return n.Name
}

// snapshot is what an assignment may change: the target's resourceVersion and labels and the
// plane RoleBindings in a namespace.
type snapshot struct {
	ResourceVersion string
	Labels          map[string]string
	RoleBindings    []string
}

func snap(t *testing.T, kind lifecycle.TargetKind, name string) snapshot {
	t.Helper()
	ctx := testContext(t)
	var obj client.Object = &corev1.Node{}
	if kind == lifecycle.KindNamespace {
		obj = &corev1.Namespace{}
	}
	if err := testCluster.Client.Get(ctx, client.ObjectKey{Name: name}, obj); err != nil {
		t.Fatal(err)
	}
	s := snapshot{ResourceVersion: obj.GetResourceVersion(), Labels: obj.GetLabels()}
	if kind == lifecycle.KindNamespace {
		var rbs rbacv1.RoleBindingList
		if err := testCluster.Client.List(ctx, &rbs, client.InNamespace(name)); err != nil {
			t.Fatal(err)
		}
		for _, rb := range rbs.Items {
			s.RoleBindings = append(s.RoleBindings, rb.Name+"@"+rb.ResourceVersion)
		}
	}
	return s
}

func sameSnapshot(t *testing.T, what string, before, after snapshot) {
	t.Helper()
	if diff := cmp.Diff(before, after); diff != "" {
		t.Fatalf("%s changed (-before +after):\n%s", what, diff)
	}
}

// createDomain creates a ComputeDomain as the admin, with finalizers if given, and removes
// them when the test ends so that the domain goes away.
// createDomain creates a ComputeDomain in ns as a tenant would. Where no mutating policy stamps
// its plane label (before Kubernetes 1.36), it carries the label its plane's controller would
// give it, its namespace's.
func createDomain(t *testing.T, c client.Client, ns, name string, finalizers ...string) *cdv1beta1.ComputeDomain {
	t.Helper()
	cd := testutil.MakeComputeDomain(name).Namespace(ns).Obj()
	if served, err := mutatingPolicyServed(); err != nil {
		t.Fatal(err)
	} else if !served {
		var nsObj corev1.Namespace
		if err := c.Get(testContext(t), client.ObjectKey{Name: ns}, &nsObj); err != nil {
			t.Fatal(err)
		}
		if id, ok := nsObj.Labels[cdv1beta1.ControlPlaneLabel]; ok {
			cd.Labels = map[string]string{cdv1beta1.ControlPlaneLabel: id}
		}
	}
	cd.Finalizers = finalizers
	if err := c.Create(testContext(t), cd); err != nil {
		t.Fatalf("creating ComputeDomain %s/%s: %v", ns, name, err)
	}
	if len(finalizers) > 0 {
		t.Cleanup(func() {
			ctx := context.Background()
			_ = testCluster.Client.Patch(ctx, cd, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))
		})
	}
	return cd
}

func domainLabel(t *testing.T, key client.ObjectKey) (string, bool) {
	t.Helper()
	var cd cdv1beta1.ComputeDomain
	if err := testCluster.Client.Get(testContext(t), key, &cd); err != nil {
		t.Fatal(err)
	}
	v, ok := cd.Labels[cdv1beta1.ControlPlaneLabel]
	return v, ok
}

// TestAssignNamespaceByAdmin: an administrator assigns a namespace with the CLI: the label and
// the plane's two RoleBindings (exact names, subjects, ClusterRoles) appear; assigning again
// changes nothing, and repairs a tampered RoleBinding; unassigning removes the label, the
// plane's mirrored Secrets (the secret mirror's marker, not other planes' or tenants' Secrets)
// and the RoleBindings, and unassigning again changes nothing.
func TestAssignNamespaceByAdmin(t *testing.T) {
	t.Parallel()
	installPolicies(t)
	ns := testCluster.Namespace(t, nil)
	ctx := testContext(t)

	mustCLI(t, []string{"RoleBinding " + ns + "/plane-a-cdplane-controller created", `assigned to control plane "plane-a"`},
		"assign", "namespace", ns, "--control-plane-id", planeA)
	got := snap(t, lifecycle.KindNamespace, ns)
	if got.Labels[cdv1beta1.ControlPlaneLabel] != planeA {
		t.Fatalf("namespace labels %v, want %s=%s", got.Labels, cdv1beta1.ControlPlaneLabel, planeA)
	}
	want := map[string]rbacv1.RoleBinding{
		"plane-a-cdplane-controller": {
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "plane-a-cdplane-controller-namespaced"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "plane-a-cdplane-controller", Namespace: "plane-a-cdplane"}},
		},
		"plane-a-cdplane-daemon": {
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "plane-a-cdplane-daemon-namespaced"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "plane-a-cdplane-daemon", Namespace: "plane-a-cdplane"}},
		},
	}
	for name, w := range want {
		var rb rbacv1.RoleBinding
		if err := testCluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &rb); err != nil {
			t.Fatalf("RoleBinding %s: %v", name, err)
		}
		if diff := cmp.Diff(w.RoleRef, rb.RoleRef); diff != "" {
			t.Errorf("RoleBinding %s roleRef (-want +got):\n%s", name, diff)
		}
		if diff := cmp.Diff(w.Subjects, rb.Subjects); diff != "" {
			t.Errorf("RoleBinding %s subjects (-want +got):\n%s", name, diff)
		}
		if rb.Labels[cdv1beta1.ControlPlaneLabel] != planeA {
			t.Errorf("RoleBinding %s labels %v, want the plane label", name, rb.Labels)
		}
	}

	// The plane's ResourceQuota bounds the namespace's domains and channel devices.
	quota := func() *corev1.ResourceQuota {
		t.Helper()
		q := &corev1.ResourceQuota{}
		if err := testCluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: lifecycle.QuotaName(planeA)}, q); err != nil {
			t.Fatalf("the plane's ResourceQuota: %v", err)
		}
		return q
	}
	if hard := quota().Spec.Hard; hard.Name(lifecycle.DomainQuotaResource, resource.DecimalSI).Value() != lifecycle.DefaultQuotaDomains ||
		hard.Name(lifecycle.ChannelQuotaResource, resource.DecimalSI).Value() != lifecycle.DefaultQuotaChannels {
		t.Errorf("the plane's ResourceQuota: %v, want the defaults", hard)
	}

	mustCLI(t, []string{"already assigned", "nothing changed"}, "assign", "namespace", ns, "--control-plane-id", planeA)
	sameSnapshot(t, "namespace after a second assign", got, snap(t, lifecycle.KindNamespace, ns))
	mustCLI(t, []string{"ResourceQuota " + ns + "/" + lifecycle.QuotaName(planeA) + " updated"},
		"assign", "namespace", ns, "--control-plane-id", planeA, "--max-domains", "2", "--max-channels", "0")
	if hard := quota().Spec.Hard; len(hard) != 1 || hard.Name(lifecycle.DomainQuotaResource, resource.DecimalSI).Value() != 2 {
		t.Errorf("the plane's ResourceQuota after --max-domains 2 --max-channels 0: %v", hard)
	}

	// A plane RoleBinding tampered with is repaired by assigning again.
	tampered := &rbacv1.RoleBinding{}
	if err := testCluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "plane-a-cdplane-daemon"}, tampered); err != nil {
		t.Fatal(err)
	}
	tampered.Subjects = append(tampered.Subjects, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"})
	if err := testCluster.Client.Update(ctx, tampered); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, []string{"RoleBinding " + ns + "/plane-a-cdplane-daemon updated"}, "assign", "namespace", ns, "--control-plane-id", planeA)
	if err := testCluster.Client.Get(ctx, client.ObjectKeyFromObject(tampered), tampered); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want["plane-a-cdplane-daemon"].Subjects, tampered.Subjects); diff != "" {
		t.Fatalf("repaired RoleBinding subjects (-want +got):\n%s", diff)
	}

	// Secrets: plane-a's mirrored copy goes with the namespace; the legacy plane's and
	// plane-b's markers, and a tenant's Secret, stay.
	secrets := map[string]map[string]string{
		"plane-a-copy": secretmirror.Marker(planeA, "plane-a-cdplane"),
		"plane-b-copy": secretmirror.Marker(planeB, "plane-b-cdplane"),
		"legacy-copy":  secretmirror.Marker("", "cdplane"),
		"tenant":       {"app": "x"},
	}
	for name, l := range secrets {
		if err := testCluster.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l}}); err != nil {
			t.Fatal(err)
		}
	}

	mustCLI(t, []string{"mirrored Secret " + ns + "/plane-a-copy deleted", "RoleBinding " + ns + "/plane-a-cdplane-daemon deleted", `unassigned from control plane "plane-a"`},
		"unassign", "namespace", ns, "--control-plane-id", planeA)
	var left corev1.SecretList
	if err := testCluster.Client.List(ctx, &left, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range left.Items {
		names = append(names, s.Name)
	}
	if diff := cmp.Diff([]string{"legacy-copy", "plane-b-copy", "tenant"}, names); diff != "" {
		t.Fatalf("Secrets left after unassign (-want +got):\n%s", diff)
	}
	if err := testCluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: lifecycle.QuotaName(planeA)}, &corev1.ResourceQuota{}); !apierrors.IsNotFound(err) {
		t.Errorf("the plane's ResourceQuota after unassign: %v, want it gone", err)
	}
	after := snap(t, lifecycle.KindNamespace, ns)
	if _, ok := after.Labels[cdv1beta1.ControlPlaneLabel]; ok || len(after.RoleBindings) != 0 {
		t.Fatalf("after unassign: labels %v, RoleBindings %v; want neither", after.Labels, after.RoleBindings)
	}
	mustCLI(t, []string{"nothing changed"}, "unassign", "namespace", ns, "--control-plane-id", planeA)
	sameSnapshot(t, "namespace after a second unassign", after, snap(t, lifecycle.KindNamespace, ns))
}

// TestAssignNodeByAdmin: an administrator assigns and unassigns a node with the CLI, both
// idempotent; other labels of the node are kept.
func TestAssignNodeByAdmin(t *testing.T) {
	t.Parallel()
	installPolicies(t)
	node := newNode(t, map[string]string{"kubernetes.io/hostname": "x"})

	mustCLI(t, []string{"label " + cdv1beta1.ControlPlaneLabel + "=plane-a set on node " + node}, "assign", "node", node, "--control-plane-id", planeA)
	got := snap(t, lifecycle.KindNode, node)
	if diff := cmp.Diff(map[string]string{"kubernetes.io/hostname": "x", cdv1beta1.ControlPlaneLabel: planeA}, got.Labels); diff != "" {
		t.Fatalf("node labels (-want +got):\n%s", diff)
	}
	mustCLI(t, []string{"nothing changed"}, "assign", "node", node, "--control-plane-id", planeA)
	sameSnapshot(t, "node after a second assign", got, snap(t, lifecycle.KindNode, node))

	mustCLI(t, []string{"removed from node " + node}, "unassign", "node", node, "--control-plane-id", planeA)
	if diff := cmp.Diff(map[string]string{"kubernetes.io/hostname": "x"}, snap(t, lifecycle.KindNode, node).Labels); diff != "" {
		t.Fatalf("node labels after unassign (-want +got):\n%s", diff)
	}
}

// TestAssignRefusedWhenAnotherPlaneOwns: a namespace or node labelled for plane-b is neither
// assigned to plane-a nor unassigned by it; the refusal names plane-b and nothing changes. A
// bad or empty id is refused before anything is read.
func TestAssignRefusedWhenAnotherPlaneOwns(t *testing.T) {
	t.Parallel()
	installPolicies(t)
	ns := testCluster.Namespace(t, map[string]string{cdv1beta1.ControlPlaneLabel: planeB})
	node := newNode(t, map[string]string{cdv1beta1.ControlPlaneLabel: planeB})

	for _, target := range []struct {
		kind lifecycle.TargetKind
		name string
	}{{lifecycle.KindNamespace, ns}, {lifecycle.KindNode, node}} {
		before := snap(t, target.kind, target.name)
		refusedCLI(t, []string{string(target.kind) + " " + target.name, `owned by control plane "plane-b"`},
			"assign", string(target.kind), target.name, "--control-plane-id", planeA)
		refusedCLI(t, []string{`owned by control plane "plane-b", not control plane "plane-a"`},
			"unassign", string(target.kind), target.name, "--control-plane-id", planeA, "--force")
		sameSnapshot(t, string(target.kind)+" after refusals", before, snap(t, target.kind, target.name))
	}

	for args, want := range map[string]string{
		"assign namespace " + ns + " --control-plane-id Plane-A": "must be lowercase",
		"assign namespace " + ns + " --control-plane-id default": `"default" is reserved`,
		"assign node " + node + " --control-plane-id=":           "a control-plane id is required",
		"unassign node " + node + " --control-plane-id=":         "a control-plane id is required",
	} {
		code, out := runCLI(t, strings.Fields(args)...)
		if code != 2 || !strings.Contains(out, want) {
			t.Errorf("cdplane %s: exit %d, output %q; want exit 2 (usage) naming %q", args, code, out, want)
		}
	}
}

// TestAssignRefusedWhenNamespaceHoldsAnotherPlanesDomains: an unlabelled namespace holding a
// live legacy ComputeDomain, or one of plane-b's (left by a forced unassign), is not assigned to
// plane-a, and nothing changes; once the only foreign domain is being deleted, it is.
func TestAssignRefusedWhenNamespaceHoldsAnotherPlanesDomains(t *testing.T) {
	t.Parallel()
	installPolicies(t)
	ctx := testContext(t)
	c := testCluster.Client

	t.Run("legacy", func(t *testing.T) {
		ns := testCluster.Namespace(t, nil)
		cd := createDomain(t, c, ns, "legacy", "planes.test/hold")
		before := snap(t, lifecycle.KindNamespace, ns)
		refusedCLI(t, []string{"holds live ComputeDomains of other control planes", ns + "/legacy (the legacy plane (no label))"},
			"assign", "namespace", ns, "--control-plane-id", planeA)
		sameSnapshot(t, "namespace after a refused assign", before, snap(t, lifecycle.KindNamespace, ns))

		// Being deleted (held by a finalizer), the domain no longer blocks the assignment.
		if err := c.Delete(ctx, cd); err != nil {
			t.Fatal(err)
		}
		mustCLI(t, []string{`assigned to control plane "plane-a"`}, "assign", "namespace", ns, "--control-plane-id", planeA)
		// The mutating policy leaves a domain being deleted as it is, so that the plane that
		// created its objects finishes with it: an update keeps it unlabelled.
		if err := waitStamped(ctx, c, ns, planeA); err != nil {
			t.Fatal(err)
		}
		if err := c.Patch(ctx, cd, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":{"planes.test/touched":"yes"}}}`))); err != nil {
			t.Fatalf("updating the domain being deleted: %v", err)
		}
		if v, ok := domainLabel(t, client.ObjectKeyFromObject(cd)); ok {
			t.Fatalf("domain being deleted got label %q", v)
		}
	})

	t.Run("plane-b", func(t *testing.T) {
		ns := testCluster.Namespace(t, nil)
		if _, err := lifecycle.Assign(ctx, c, planeB, lifecycle.Target{Kind: lifecycle.KindNamespace, Name: ns}); err != nil {
			t.Fatal(err)
		}
		if err := waitStamped(ctx, c, ns, planeB); err != nil {
			t.Fatal(err)
		}
		cd := createDomain(t, c, ns, "b")
		if v, _ := domainLabel(t, client.ObjectKeyFromObject(cd)); v != planeB {
			t.Fatalf("plane-b's domain labelled %q", v)
		}
		if _, err := lifecycle.Unassign(ctx, c, planeB, lifecycle.Target{Kind: lifecycle.KindNamespace, Name: ns}, true); err != nil {
			t.Fatalf("forced unassign: %v", err)
		}
		before := snap(t, lifecycle.KindNamespace, ns)
		refusedCLI(t, []string{ns + `/b (control plane "plane-b")`}, "assign", "namespace", ns, "--control-plane-id", planeA)
		sameSnapshot(t, "namespace after a refused assign", before, snap(t, lifecycle.KindNamespace, ns))
	})
}

// TestUnassignRefusedWhilePlaneDomainsLive: a namespace holding plane-a's live ComputeDomain,
// or a node serving it, is not unassigned without --force, and nothing changes; with --force it
// is, and the domain, keeping its label, can still be updated (its finalizer can go).
func TestUnassignRefusedWhilePlaneDomainsLive(t *testing.T) {
	t.Parallel()
	installPolicies(t)
	ctx := testContext(t)
	c := testCluster.Client
	ns := testCluster.Namespace(t, nil)
	mustCLI(t, nil, "assign", "namespace", ns, "--control-plane-id", planeA)
	if err := waitStamped(ctx, c, ns, planeA); err != nil {
		t.Fatal(err)
	}
	cd := createDomain(t, c, ns, "a", "planes.test/hold")
	node := newNode(t, map[string]string{cdv1beta1.ControlPlaneLabel: planeA, cdv1beta1.ComputeDomainLabel: string(cd.UID)})

	for _, target := range []struct {
		kind lifecycle.TargetKind
		name string
		says string
	}{{lifecycle.KindNamespace, ns, "still holds"}, {lifecycle.KindNode, node, "still serves"}} {
		before := snap(t, target.kind, target.name)
		refusedCLI(t, []string{target.says + ` live ComputeDomains of control plane "plane-a": ` + ns + "/a", "force"},
			"unassign", string(target.kind), target.name, "--control-plane-id", planeA)
		sameSnapshot(t, string(target.kind)+" after a refused unassign", before, snap(t, target.kind, target.name))
		mustCLI(t, []string{"unassigned from"}, "unassign", string(target.kind), target.name, "--control-plane-id", planeA, "--force")
	}
	if err := waitStamped(ctx, c, ns, ""); err != nil {
		t.Fatal(err)
	}
	if v, _ := domainLabel(t, client.ObjectKeyFromObject(cd)); v != planeA {
		t.Fatalf("domain left by a forced unassign labelled %q, want %q", v, planeA)
	}
	if err := c.Patch(ctx, cd, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		t.Fatalf("removing the finalizer of a domain left by a forced unassign: %v", err)
	}
}

// TestAssignNodeRefusedWhileServingAnotherPlanesDomain: a node carrying the node label of
// plane-b's live ComputeDomain is not assigned to plane-a; a stale label (no such domain) does
// not block.
func TestAssignNodeRefusedWhileServingAnotherPlanesDomain(t *testing.T) {
	t.Parallel()
	installPolicies(t)
	ctx := testContext(t)
	c := testCluster.Client
	ns := testCluster.Namespace(t, nil)
	if _, err := lifecycle.Assign(ctx, c, planeB, lifecycle.Target{Kind: lifecycle.KindNamespace, Name: ns}); err != nil {
		t.Fatal(err)
	}
	if err := waitStamped(ctx, c, ns, planeB); err != nil {
		t.Fatal(err)
	}
	cd := createDomain(t, c, ns, "b")
	serving := newNode(t, map[string]string{cdv1beta1.ComputeDomainLabel: string(cd.UID)})
	before := snap(t, lifecycle.KindNode, serving)
	refusedCLI(t, []string{"node " + serving + ": serves live ComputeDomains of other control planes: " + ns + `/b (control plane "plane-b")`},
		"assign", "node", serving, "--control-plane-id", planeA)
	sameSnapshot(t, "node after a refused assign", before, snap(t, lifecycle.KindNode, serving))

	stale := newNode(t, map[string]string{cdv1beta1.ComputeDomainLabel: "00000000-0000-0000-0000-000000000000"})
	mustCLI(t, []string{"assigned to"}, "assign", "node", stale, "--control-plane-id", planeA)
}

// TestAssignRefusedOverForeignRoleBinding: a same-named RoleBinding that is not the plane's is
// never overwritten: the assignment is refused, naming it, before the namespace is labelled.
func TestAssignRefusedOverForeignRoleBinding(t *testing.T) {
	t.Parallel()
	installPolicies(t)
	ctx := testContext(t)
	ns := testCluster.Namespace(t, nil)
	foreign := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plane-a-cdplane-controller"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "someone"}},
	}
	if err := testCluster.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	before := snap(t, lifecycle.KindNamespace, ns)
	refusedCLI(t, []string{"RoleBinding " + ns + `/plane-a-cdplane-controller exists and is not control plane "plane-a"'s`},
		"assign", "namespace", ns, "--control-plane-id", planeA)
	sameSnapshot(t, "namespace after a refused assign", before, snap(t, lifecycle.KindNamespace, ns))
}

// TestAssignRefusedOverForeignQuota: a ResourceQuota of the plane's quota name that is not the
// plane's is refused before anything changes; with both bounds 0 the plane sets no quota and
// the assignment goes ahead, leaving the foreign one alone.
func TestAssignRefusedOverForeignQuota(t *testing.T) {
	t.Parallel()
	installPolicies(t)
	ctx := testContext(t)
	ns := testCluster.Namespace(t, nil)
	foreign := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: lifecycle.QuotaName(planeA)},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("5")}}}
	if err := testCluster.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	before := snap(t, lifecycle.KindNamespace, ns)
	refusedCLI(t, []string{"ResourceQuota " + ns + "/" + lifecycle.QuotaName(planeA) + " exists and is not control plane"},
		"assign", "namespace", ns, "--control-plane-id", planeA)
	sameSnapshot(t, "namespace after a refused assign", before, snap(t, lifecycle.KindNamespace, ns))
	mustCLI(t, []string{`assigned to control plane "plane-a"`}, "assign", "namespace", ns, "--control-plane-id", planeA, "--max-domains", "0", "--max-channels", "0")
	cur := &corev1.ResourceQuota{}
	if err := testCluster.Client.Get(ctx, client.ObjectKeyFromObject(foreign), cur); err != nil || !cur.Spec.Hard.Pods().Equal(resource.MustParse("5")) {
		t.Errorf("the foreign ResourceQuota after the assignment: %v, %v; want it untouched", err, cur.Spec.Hard)
	}
}
