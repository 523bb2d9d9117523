package planes

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
)

// TestControllerWritesOnlyItsOwnDomainsAndNamespaces: a plane's controller holds cluster-wide
// rights on ComputeDomains (so that it can always finalize its own), and the legacy plane's
// controller holds its namespaced rights cluster-wide; with a leaked token of either, the
// controller-scope policy refuses writes to another plane's domains, to a domain's plane label,
// and to claim templates outside the plane's namespaces. Without Secret mirroring neither
// holds any Secrets rights. A domain left in a namespace that lost the plane's label and
// RoleBindings (a forced unassign) can still be finalized.
func TestControllerWritesOnlyItsOwnDomainsAndNamespaces(t *testing.T) {
	installPolicies(t) // not parallel: installs the legacy plane's cluster-wide bindings
	ctx := testContext(t)
	const id = "scope"
	driverNS := installPlaneRights(t, id, "rbac-controller.yaml", "policy-controller.yaml")
	legacyNS := installPlaneRights(t, "", "rbac-controller.yaml", "policy-controller.yaml")
	own, foreign, free := assignedNamespace(t, id), assignedNamespace(t, planeB), testCluster.Namespace(t, nil)
	domain := func(ns string) *cdv1beta1.ComputeDomain { return createDomain(t, testCluster.Client, ns, "cd") }
	ownCD, foreignCD, freeCD := domain(own), domain(foreign), domain(free)
	account := func(ns, name string) client.Client {
		u, err := serviceAccountIdentity(ctx, ns, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		return u.c
	}
	planeCtl := account(driverNS, plane.Name(id, "cdplane-controller"))
	legacyCtl := account(legacyNS, "cdplane-controller")

	patch := func(c client.Client, cd *cdv1beta1.ComputeDomain, body string, opts ...client.PatchOption) error {
		return c.Patch(ctx, cd.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(body)), opts...)
	}
	const touch = `{"metadata":{"annotations":{"attack":"yes"}}}`
	// Each plane's policy is its own object, loaded by the apiserver on its own time: wait for both.
	eventuallyRefused(t, "plane controller touching another plane's domain", func() error {
		return patch(planeCtl, foreignCD, touch, client.DryRunAll)
	})
	eventuallyRefused(t, "legacy controller touching a named plane's domain", func() error {
		return patch(legacyCtl, ownCD, touch, client.DryRunAll)
	})
	for what, tc := range map[string]struct {
		c    client.Client
		cd   *cdv1beta1.ComputeDomain
		body string
		ok   bool
	}{
		"plane: another plane's domain":  {c: planeCtl, cd: foreignCD, body: touch},
		"plane: the legacy plane's":      {c: planeCtl, cd: freeCD, body: touch},
		"plane: its own domain":          {c: planeCtl, cd: ownCD, body: touch, ok: true},
		"legacy: a named plane's domain": {c: legacyCtl, cd: ownCD, body: touch},
		"legacy: its own domain":         {c: legacyCtl, cd: freeCD, body: touch, ok: true},
		// The one label change a plane's controller may make (where no mutating policy runs) is
		// absent -> its own id in a namespace assigned to it; never on another's domain.
		"plane: labelling the legacy plane's domain for itself": {c: planeCtl, cd: freeCD, body: labelBody(id)},
		"plane: relabelling another plane's domain for itself":  {c: planeCtl, cd: foreignCD, body: labelBody(id)},
	} {
		err := patch(tc.c, tc.cd, tc.body, client.DryRunAll)
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v, want admitted", what, err)
		case !tc.ok && !isAdmissionRefusal(err):
			t.Errorf("%s: %v, want an admission refusal", what, err)
		}
	}

	// Claim templates: the legacy plane's controller, bound cluster-wide, stays out of a named
	// plane's namespace.
	tmpl := func(ns string) *resourcev1.ResourceClaimTemplate {
		return claimTemplate(ns, "t", exactly(cdv1beta1.ChannelDeviceClass, planeSelector("")))
	}
	if err := legacyCtl.Create(ctx, tmpl(own), client.DryRunAll); !isAdmissionRefusal(err) || !apierrors.IsForbidden(err) {
		t.Errorf("legacy controller writing a claim template in plane %s's namespace: %v, want refused", id, err)
	}
	if err := legacyCtl.Create(ctx, tmpl(free), client.DryRunAll); err != nil {
		t.Errorf("legacy controller writing a claim template in an unassigned namespace: %v, want admitted", err)
	}
	// Nor in the cluster's own namespaces, which carry no plane label either.
	if err := legacyCtl.Create(ctx, tmpl("kube-system"), client.DryRunAll); !isAdmissionRefusal(err) || !strings.Contains(err.Error(), "never kube-*") {
		t.Errorf("legacy controller writing a claim template in kube-system: %v, want refused", err)
	}
	// Nobody creates a ComputeDomain in a kube-* namespace, an administrator included.
	if err := testCluster.Client.Create(ctx, testutil.MakeComputeDomain("cd").Namespace("kube-system").Obj(), client.DryRunAll); !isAdmissionRefusal(err) ||
		!strings.Contains(err.Error(), "not served in namespace kube-system") {
		t.Errorf("a ComputeDomain in kube-system: %v, want refused", err)
	}
	// Before 1.36 a domain created in a named plane's namespace is unlabelled until that plane
	// labels it: the legacy plane, which owns unlabelled domains, may not take it meanwhile.
	if served, err := mutatingPolicyServed(); err != nil {
		t.Fatal(err)
	} else if !served {
		pending := testutil.MakeComputeDomain("pending").Namespace(own).Obj()
		if err := testCluster.Client.Create(ctx, pending); err != nil {
			t.Fatal(err)
		}
		if err := patch(legacyCtl, pending, `{"metadata":{"finalizers":["`+cdv1beta1.Finalizer+`"]}}`, client.DryRunAll); !isAdmissionRefusal(err) ||
			!strings.Contains(err.Error(), "may not take ComputeDomain") {
			t.Errorf("legacy controller taking an unlabelled domain in plane %s's namespace: %v, want refused", id, err)
		}
	}

	// Secrets: no rights at all without mirroring, not even in the plane's own namespaces.
	for what, c := range map[string]client.Client{"plane": planeCtl, "legacy": legacyCtl} {
		for _, ns := range []string{own, free, driverNS, legacyNS} {
			if err := c.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)); !apierrors.IsForbidden(err) {
				t.Errorf("%s controller listing Secrets in %s without mirroring: %v, want forbidden", what, ns, err)
			}
		}
	}

	// A forced unassign: the namespace loses the plane's label and RoleBindings while a domain
	// with a finalizer lives there; the controller still removes its finalizer.
	stranded := assignedNamespace(t, id)
	cd := createDomain(t, testCluster.Client, stranded, "stranded", cdv1beta1.Finalizer)
	if err := testCluster.Client.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: stranded}},
		client.RawPatch(types.MergePatchType, labelPatch(nil))); err != nil {
		t.Fatal(err)
	}
	if err := testCluster.Client.DeleteAllOf(ctx, &rbacv1.RoleBinding{}, client.InNamespace(stranded)); err != nil {
		t.Fatal(err)
	}
	if err := testCluster.Client.Delete(ctx, cd); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the controller removes its finalizer from a stranded domain", func() (bool, error) {
		err := patch(planeCtl, cd, `{"metadata":{"finalizers":null}}`)
		return err == nil, err
	})
	if err := testCluster.Client.Get(ctx, client.ObjectKeyFromObject(cd), &cdv1beta1.ComputeDomain{}); !apierrors.IsNotFound(err) {
		t.Errorf("the stranded domain after its finalizer went: %v, want NotFound", err)
	}
}

// labelBody is a merge patch setting a ComputeDomain's plane label.
func labelBody(id string) string {
	return `{"metadata":{"labels":{"` + cdv1beta1.ControlPlaneLabel + `":"` + id + `"}}}`
}
