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
	"cdplane/internal/testutil/prereqs"
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
	if served, err := mutatingPolicyServed(); err != nil {
		t.Fatal(err)
	} else if !served {
		// Before 1.36 the chart leaves the mutating policy out and nothing stamps at admission
		// (the plane's controller labels instead: controller.TestControllerLabelsDomainsWithoutMutatingPolicy,
		// make test-e2e-oldest). What holds here: the tenant's domain is stored as written, and a
		// forged label is still refused by the validating policy.
		plain := testutil.MakeComputeDomain("plain").Namespace(ns).Obj()
		if err := u.c.Create(ctx, plain, client.DryRunAll); err != nil {
			t.Fatalf("tenant creating a domain: %v", err)
		}
		if v, ok := plain.Labels[cdv1beta1.ControlPlaneLabel]; ok {
			t.Fatalf("domain stamped with %q where no mutating policy is served", v)
		}
		forged := testutil.MakeComputeDomain("forged").Namespace(ns).Label(cdv1beta1.ControlPlaneLabel, planeB).Obj()
		if err := u.c.Create(ctx, forged, client.DryRunAll); !apierrors.IsForbidden(err) {
			t.Fatalf("tenant creating a domain labelled for %s in %s's namespace: %v, want refused", planeB, planeA, err)
		}
		return
	}

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
// No plane's own accounts may change plane labels either (assignment is an administrator's act),
// and an account merely named like a plane's, outside its driver namespace, is no plane's.
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

	// A plane's own accounts, allowed by RBAC, may not move a node into or out of their plane.
	own := planeServiceAccount(t, planeB, plane.ControllerServiceAccountLegacyName)
	refusedAttempts(t, own, true, []labelAttempt{{kind: lifecycle.KindNode, name: unowned, value: ptr(planeB)}})
	ownA := planeServiceAccount(t, planeA, plane.ControllerServiceAccountLegacyName)
	if err := ownA.bindClusterRole(ctx, labelEditorRole); err != nil {
		t.Fatal(err)
	}
	refusedAttempts(t, ownA, true, []labelAttempt{{kind: lifecycle.KindNode, name: owned}})

	// "plane-b-cdplanex" is no plane's driver namespace.
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
	testutil.Eventually(t, 30*time.Second, "the default configuration refuses platform-admin", func() (bool, error) {
		err := setLabel(ctx, admin.c, &corev1.Node{}, client.ObjectKey{Name: node}, ptr(planeA), client.DryRunAll)
		return isPolicyRefusal(err), err
	})
	if _, err := lifecycle.Assign(ctx, admin.c, planeA, target); !isPolicyRefusal(err) {
		t.Fatalf("platform-admin assigning before the group is configured: %v; want the policy's refusal", err)
	}

	setGroups := func(groups ...any) error {
		return prereqs.Apply(ctx, c, map[string]any{"adminGroups": groups}, manifestFile)
	}
	if err := setGroups("system:masters", "platform-admins"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = setGroups("system:masters") })

	testutil.Eventually(t, 30*time.Second, "platform-admin can assign a node", func() (bool, error) {
		_, err := lifecycle.Assign(ctx, admin.c, planeA, target)
		return err == nil, err
	})
	if _, err := lifecycle.Unassign(ctx, c, planeA, target, false); err != nil {
		t.Fatalf("system:masters unassigning: %v", err)
	}
}

// TestOwnershipPolicyBlocksNothingElse: the policy has no parameter object that could go missing;
// a change to a labelled node that leaves the plane label alone (a heartbeat, an annotation) is
// admitted for anyone RBAC allows, while changing the label is refused.
func TestOwnershipPolicyBlocksNothingElse(t *testing.T) {
	t.Parallel()
	installPolicies(t)
	ctx := testContext(t)
	labelled := newNode(t, map[string]string{cdv1beta1.ControlPlaneLabel: planeA})
	editor, err := newIdentity(ctx, "unrelated-node-editor", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := editor.bindClusterRole(ctx, labelEditorRole); err != nil {
		t.Fatal(err)
	}
	touch := []byte(`{"metadata":{"annotations":{"planes.test/touched":"yes"}}}`)
	if err := editor.c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: labelled}},
		client.RawPatch("application/merge-patch+json", touch), client.DryRunAll); err != nil {
		t.Errorf("annotating a labelled node: %v, want admitted", err)
	}
	if err := setLabel(ctx, editor.c, &corev1.Node{}, client.ObjectKey{Name: labelled}, ptr(planeB), client.DryRunAll); !isPolicyRefusal(err) {
		t.Errorf("relabelling a labelled node: %v, want the policy's refusal", err)
	}
}
