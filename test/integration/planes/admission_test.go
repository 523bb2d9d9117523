package planes

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/lifecycle"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
)

// tenant is a user with the built-in edit ClusterRole (and rights on ComputeDomains) in ns.
func tenant(t *testing.T, ns string) *identity {
	t.Helper()
	ctx := testContext(t)
	u, err := newIdentity(ctx, "tenant-"+ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.bindInNamespace(ctx, ns, "edit", nil); err != nil {
		t.Fatal(err)
	}
	if err := u.bindInNamespace(ctx, ns, domainEditorRole.Name, domainEditorRole); err != nil {
		t.Fatal(err)
	}
	return u
}

// assignedNamespace is a namespace an administrator assigned to plane id, once admission sees
// the assignment.
func assignedNamespace(t *testing.T, id string) string {
	t.Helper()
	ctx := testContext(t)
	ns := testCluster.Namespace(t, nil)
	if _, err := lifecycle.Assign(ctx, testCluster.Client, id, lifecycle.Target{Kind: lifecycle.KindNamespace, Name: ns}); err != nil {
		t.Fatal(err)
	}
	if err := waitStamped(ctx, testCluster.Client, ns, id); err != nil {
		t.Fatal(err)
	}
	return ns
}

// TestDomainLabelFollowsNamespace: in plane-a's namespace, a tenant's ComputeDomain gets
// plane-a's label whatever the tenant sets; changing it to plane-b, removing it with a patch, or
// dropping every label with an update all leave plane-a's label in place. plane-b's controller,
// with rights on the domain, cannot change it either.
func TestDomainLabelFollowsNamespace(t *testing.T) {
	t.Parallel()
	installPolicies(t)
	ctx := testContext(t)
	ns := assignedNamespace(t, planeA)
	u := tenant(t, ns)

	plain := testutil.MakeComputeDomain("plain").Namespace(ns).Obj()
	forged := testutil.MakeComputeDomain("forged").Namespace(ns).Label(cdv1beta1.ControlPlaneLabel, planeB).Obj()
	for _, cd := range []*cdv1beta1.ComputeDomain{plain, forged} {
		if err := u.c.Create(ctx, cd); err != nil {
			t.Fatalf("tenant creating %s: %v", cd.Name, err)
		}
		if v, _ := domainLabel(t, client.ObjectKeyFromObject(cd)); v != planeA {
			t.Fatalf("domain %s created by the tenant labelled %q, want %q", cd.Name, v, planeA)
		}
	}

	key := client.ObjectKeyFromObject(plain)
	changes := map[string]func() error{
		"patch to plane-b": func() error {
			return setLabel(ctx, u.c, &cdv1beta1.ComputeDomain{}, key, ptr(planeB))
		},
		"patch removing it": func() error {
			return setLabel(ctx, u.c, &cdv1beta1.ComputeDomain{}, key, nil)
		},
		"update dropping all labels": func() error {
			var cd cdv1beta1.ComputeDomain
			if err := u.c.Get(ctx, key, &cd); err != nil {
				return err
			}
			cd.Labels = nil
			return u.c.Update(ctx, &cd)
		},
		"plane-b's controller patching to plane-b": func() error {
			sa := planeServiceAccount(t, planeB, plane.ControllerServiceAccountLegacyName)
			if err := sa.bindInNamespace(ctx, ns, domainEditorRole.Name, domainEditorRole); err != nil {
				return err
			}
			return setLabel(ctx, sa.c, &cdv1beta1.ComputeDomain{}, key, ptr(planeB))
		},
	}
	for name, change := range changes {
		var before cdv1beta1.ComputeDomain
		if err := testCluster.Client.Get(ctx, key, &before); err != nil {
			t.Fatal(err)
		}
		if err := change(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if v, ok := domainLabel(t, key); !ok || v != planeA {
			t.Errorf("%s: label %q (present %v), want %q", name, v, ok, planeA)
		}
	}
}

// TestForgedDomainLabelRefused: in a namespace no plane owns, a ComputeDomain carrying a plane
// label (or an empty one) is refused at creation, for tenants and administrators alike, and so
// is adding the label later; the message names the namespace and both values.
func TestForgedDomainLabelRefused(t *testing.T) {
	t.Parallel()
	installPolicies(t)
	ctx := testContext(t)
	ns := testCluster.Namespace(t, nil)
	u := tenant(t, ns)

	for who, c := range map[string]client.Client{"tenant": u.c, "administrator": testCluster.Client} {
		for _, value := range []string{planeA, ""} {
			cd := testutil.MakeComputeDomain("forged").Namespace(ns).Label(cdv1beta1.ControlPlaneLabel, value).Obj()
			err := c.Create(ctx, cd)
			want := fmt.Sprintf("must equal its namespace %s's: want none, got %q", ns, value)
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s creating a domain labelled %q: %v; want a refusal containing %q", who, value, err, want)
			}
		}
	}

	cd := testutil.MakeComputeDomain("plain").Namespace(ns).Obj()
	if err := u.c.Create(ctx, cd); err != nil {
		t.Fatal(err)
	}
	err := setLabel(ctx, u.c, &cdv1beta1.ComputeDomain{}, client.ObjectKeyFromObject(cd), ptr(planeA))
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `want none, got "plane-a"`) {
		t.Fatalf("tenant adding a plane label to a domain: %v; want a refusal", err)
	}
	if v, ok := domainLabel(t, client.ObjectKeyFromObject(cd)); ok {
		t.Fatalf("domain labelled %q after a refused change", v)
	}
}

// labelAttempt is one attempt to set (value non-nil) or remove the plane label of a namespace
// or node.
type labelAttempt struct {
	kind   lifecycle.TargetKind
	name   string
	value  *string
	status bool // through the status subresource
}

func (a labelAttempt) String() string {
	v := "remove"
	if a.value != nil {
		v = "set " + *a.value
	}
	if a.status {
		v += " via status"
	}
	return v + " on " + string(a.kind) + " " + a.name
}

// run sends the attempt's patch as c, and nothing else: a read first would be refused to an
// identity that may not read the object, and the patch would never be tried.
func (a labelAttempt) run(t *testing.T, c client.Client) error {
	t.Helper()
	ctx := testContext(t)
	var obj client.Object = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.name}}
	if a.kind == lifecycle.KindNamespace {
		obj = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: a.name}}
	}
	patch := client.RawPatch("application/merge-patch+json", labelPatch(a.value))
	if a.status {
		return c.Status().Patch(ctx, obj, patch)
	}
	return c.Patch(ctx, obj, patch)
}

// refusedAttempts runs each attempt as u and fails the test unless it is refused (by RBAC, or
// by the label policy when policyOnly: u has the RBAC right) and the target's label is
// unchanged.
func refusedAttempts(t *testing.T, u *identity, policyOnly bool, attempts []labelAttempt) {
	t.Helper()
	for _, a := range attempts {
		before := snap(t, a.kind, a.name).Labels[cdv1beta1.ControlPlaneLabel]
		err := a.run(t, u.c)
		switch {
		case policyOnly && !isPolicyRefusal(err):
			t.Errorf("%s as %s: %v; want the label policy's refusal", a, u, err)
		case !policyOnly && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cannot patch resource")):
			t.Errorf("%s as %s: %v; want RBAC's refusal", a, u, err)
		}
		if after := snap(t, a.kind, a.name).Labels[cdv1beta1.ControlPlaneLabel]; after != before {
			t.Errorf("%s as %s: label %q became %q", a, u, before, after)
		}
	}
}

// admittedAttempt runs a as u, which must be admitted, and checks on a fresh read that the
// label is what a asked for.
func admittedAttempt(t *testing.T, u *identity, a labelAttempt) {
	t.Helper()
	if err := a.run(t, u.c); err != nil {
		t.Errorf("%s as %s: %v; want it admitted", a, u, err)
		return
	}
	want := ""
	if a.value != nil {
		want = *a.value
	}
	if got := snap(t, a.kind, a.name).Labels[cdv1beta1.ControlPlaneLabel]; got != want {
		t.Errorf("%s as %s: admitted, but a fresh read shows the label %q", a, u, got)
	}
}

// TestTenantCannotChangePlaneLabels: a tenant with edit rights in plane-a's namespace can set,
// change or remove the plane label of neither that namespace nor a node (RBAC refuses), and a
// user allowed by RBAC to change namespaces and nodes, but not an administrator, is refused by
// the label policy, through the status subresources too. (The tenant's attempts on a
// ComputeDomain's label are in TestDomainLabelFollowsNamespace and TestForgedDomainLabelRefused.)
func TestTenantCannotChangePlaneLabels(t *testing.T) {
	t.Parallel()
	installPolicies(t)
	ctx := testContext(t)
	ns := assignedNamespace(t, planeA)
	free := testCluster.Namespace(t, nil)
	owned := newNode(t, map[string]string{cdv1beta1.ControlPlaneLabel: planeA})
	unowned := newNode(t, nil)
	attempts := []labelAttempt{
		{kind: lifecycle.KindNamespace, name: ns, value: ptr(planeB)},
		{kind: lifecycle.KindNamespace, name: ns},
		{kind: lifecycle.KindNamespace, name: free, value: ptr(planeA)},
		{kind: lifecycle.KindNode, name: owned, value: ptr(planeB)},
		{kind: lifecycle.KindNode, name: owned},
		{kind: lifecycle.KindNode, name: unowned, value: ptr(planeA)},
	}
	refusedAttempts(t, tenant(t, ns), false, attempts)
	if _, err := lifecycle.Assign(ctx, tenant(t, free).c, planeA, lifecycle.Target{Kind: lifecycle.KindNamespace, Name: free}); !apierrors.IsForbidden(err) {
		t.Errorf("tenant assigning its namespace: %v; want forbidden", err)
	}

	editor, err := newIdentity(ctx, "label-editor-"+ns, []string{"namespace-editors"})
	if err != nil {
		t.Fatal(err)
	}
	if err := editor.bindClusterRole(ctx, labelEditorRole); err != nil {
		t.Fatal(err)
	}
	withStatus := append([]labelAttempt{}, attempts...)
	withStatus = append(withStatus,
		labelAttempt{kind: lifecycle.KindNamespace, name: ns, value: ptr(planeB), status: true},
		labelAttempt{kind: lifecycle.KindNode, name: owned, status: true},
		labelAttempt{kind: lifecycle.KindNode, name: unowned, value: ptr(planeA), status: true},
	)
	refusedAttempts(t, editor, true, withStatus)
}

// TestOtherPlaneServiceAccountsCannotChangePlaneLabels: plane-b's controller and daemon service
// accounts (real tokens), allowed by RBAC to change namespaces and nodes, cannot set, change or
// remove plane-a's label, nor give a free namespace or node to plane-a: the label policy refuses.
// They may set and remove their own plane's label, and plane-a's controller may remove plane-a's;
// a service account outside a driver namespace may do neither.
func TestOtherPlaneServiceAccountsCannotChangePlaneLabels(t *testing.T) {
	t.Parallel()
	installPolicies(t)
	ctx := testContext(t)
	ns := assignedNamespace(t, planeA)
	free := testCluster.Namespace(t, nil)
	owned := newNode(t, map[string]string{cdv1beta1.ControlPlaneLabel: planeA})
	unowned := newNode(t, nil)

	for _, legacy := range []string{plane.ControllerServiceAccountLegacyName, plane.DaemonServiceAccountLegacyName} {
		sa := planeServiceAccount(t, planeB, legacy)
		if err := sa.bindClusterRole(ctx, labelEditorRole); err != nil {
			t.Fatal(err)
		}
		refusedAttempts(t, sa, true, []labelAttempt{
			{kind: lifecycle.KindNamespace, name: ns, value: ptr(planeB)},
			{kind: lifecycle.KindNamespace, name: ns},
			{kind: lifecycle.KindNamespace, name: free, value: ptr(planeA)},
			{kind: lifecycle.KindNode, name: owned, value: ptr(planeB)},
			{kind: lifecycle.KindNode, name: owned},
			{kind: lifecycle.KindNode, name: owned, status: true},
			{kind: lifecycle.KindNode, name: unowned, value: ptr(planeA)},
		})
		if _, err := lifecycle.Assign(ctx, sa.c, planeB, lifecycle.Target{Kind: lifecycle.KindNamespace, Name: ns}); !lifecycle.IsRefused(err) {
			t.Errorf("%s assigning plane-a's namespace to plane-b: %v; want refused", sa, err)
		}
	}

	// A plane's own service accounts may set and remove its own label; an admitted change is
	// on the object, as a fresh read shows.
	own := planeServiceAccount(t, planeB, plane.ControllerServiceAccountLegacyName)
	for _, a := range []labelAttempt{{kind: lifecycle.KindNode, name: unowned, value: ptr(planeB)}, {kind: lifecycle.KindNode, name: unowned}} {
		admittedAttempt(t, own, a)
	}
	ownA := planeServiceAccount(t, planeA, plane.ControllerServiceAccountLegacyName)
	if err := ownA.bindClusterRole(ctx, labelEditorRole); err != nil {
		t.Fatal(err)
	}
	admittedAttempt(t, ownA, labelAttempt{kind: lifecycle.KindNode, name: owned})

	// The driver-namespace rule is exact: "plane-b-cdplanex" is no plane's.
	outsider, err := serviceAccountIdentity(ctx, "plane-b-cdplanex", "plane-b-cdplane-controller", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := outsider.bindClusterRole(ctx, labelEditorRole); err != nil {
		t.Fatal(err)
	}
	refusedAttempts(t, outsider, true, []labelAttempt{{kind: lifecycle.KindNode, name: unowned, value: ptr(planeB)}})
}

// TestAdministratorGroupIsConfigurable: a member of group platform-admins, allowed by RBAC,
// cannot assign a node until the group is added to the policy's ConfigMap; then it can, and
// system:masters still can.
func TestAdministratorGroupIsConfigurable(t *testing.T) {
	installPolicies(t) // not parallel: changes the shared ConfigMap
	ctx := testContext(t)
	c := testCluster.Client
	node := newNode(t, nil)
	admin, err := newIdentity(ctx, "platform-admin", []string{"platform-admins"})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.bindClusterRole(ctx, labelEditorRole); err != nil {
		t.Fatal(err)
	}
	target := lifecycle.Target{Kind: lifecycle.KindNode, Name: node}
	// A previous run's restore of the ConfigMap may still be on its way to the policy's cache.
	eventually(t, 30*time.Second, "the default configuration refuses platform-admin", func() (bool, error) {
		err := setLabel(ctx, admin.c, &corev1.Node{}, client.ObjectKey{Name: node}, ptr(planeA), client.DryRunAll)
		return isPolicyRefusal(err), err
	})
	if _, err := lifecycle.Assign(ctx, admin.c, planeA, target); !isPolicyRefusal(err) {
		t.Fatalf("platform-admin assigning before the group is configured: %v; want the policy's refusal", err)
	}

	cm := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: "kube-system", Name: "cdplane-ownership-policy"}
	if err := c.Get(ctx, key, cm); err != nil {
		t.Fatal(err)
	}
	original := cm.Data["adminGroups"]
	setGroups := func(groups string) error {
		return c.Patch(ctx, cm, client.RawPatch("application/merge-patch+json", []byte(`{"data":{"adminGroups":"`+groups+`"}}`)))
	}
	if err := setGroups("system:masters, platform-admins"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = setGroups(original) })

	eventually(t, 30*time.Second, "platform-admin can assign a node", func() (bool, error) {
		_, err := lifecycle.Assign(ctx, admin.c, planeA, target)
		return err == nil, err
	})
	if _, err := lifecycle.Unassign(ctx, c, planeA, target, false); err != nil {
		t.Fatalf("system:masters unassigning: %v", err)
	}
}

// TestMissingConfigMapFailsClosed: without the policy's ConfigMap, no change to a labelled node
// is admitted, not even an administrator's unrelated one, while unlabelled nodes are not
// affected; with the ConfigMap back, changes are admitted again.
func TestMissingConfigMapFailsClosed(t *testing.T) {
	installPolicies(t) // not parallel: deletes the shared ConfigMap for a while
	ctx := testContext(t)
	c := testCluster.Client
	labelled := newNode(t, map[string]string{cdv1beta1.ControlPlaneLabel: planeA})
	unlabelled := newNode(t, nil)
	touch := func(node string) error {
		return c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
			client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":{"planes.test/touched":"yes"}}}`)), client.DryRunAll)
	}

	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "cdplane-ownership-policy"}, cm); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	restore := func() error {
		again := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cm.Namespace, Name: cm.Name}, Data: cm.Data}
		if err := c.Create(ctx, again); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	}
	t.Cleanup(func() { _ = restore() })

	eventually(t, 30*time.Second, "a labelled node cannot be changed without the ConfigMap", func() (bool, error) {
		err := touch(labelled)
		return err != nil && strings.Contains(err.Error(), "no params found"), err
	})
	if err := touch(unlabelled); err != nil {
		t.Fatalf("changing an unlabelled node without the ConfigMap: %v", err)
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "a labelled node can be changed with the ConfigMap back", func() (bool, error) {
		err := touch(labelled)
		return err == nil, err
	})
}
