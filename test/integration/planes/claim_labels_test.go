package planes

import (
	"strings"
	"sync"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/plane"
	"cdplane/internal/testutil/prereqs"
)

var claimLabelsPolicyOnce sync.Once

// TestClaimLabelsOnlyFromPlanesAndKCM: each plane's controller caches the claims and templates
// labelled for its plane, in any namespace. A tenant cannot put those labels on its claims or
// templates (nor into a template's claim labels), so it cannot fill another plane's controller's
// memory; kube-controller-manager copying a template's labels onto claims, and a plane's
// controller labelling its own templates for its own plane, are admitted.
func TestClaimLabelsOnlyFromPlanesAndKCM(t *testing.T) {
	t.Parallel()
	installDevicePolicies(t)
	var err error
	claimLabelsPolicyOnce.Do(func() {
		err = prereqs.Create(testContext(t), testCluster.Client, "claim-labels-policy.yaml")
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	const id = "clb"
	ns := assignedNamespace(t, id)
	clientFor := func(u *identity, err error) kubernetes.Interface {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if err := u.bindInNamespace(ctx, ns, claimEditorRole.Name, claimEditorRole); err != nil {
			t.Fatal(err)
		}
		return kubernetes.NewForConfigOrDie(u.cfg)
	}
	tenantCS := clientFor(tenant(t, ns), nil)
	kcm := clientFor(newIdentity(ctx, "system:kube-controller-manager", nil))
	controller := clientFor(serviceAccountIdentity(ctx, plane.Name(id, plane.DriverNamespaceLegacyName), plane.Name(id, "cdplane-controller"), nil))

	labelled := func(c *resourcev1.ResourceClaim, l map[string]string) *resourcev1.ResourceClaim {
		c.Labels = l
		return c
	}
	planeB := map[string]string{cdv1beta1.ControlPlaneLabel: "plane-b"}
	domainX := map[string]string{cdv1beta1.ComputeDomainLabel: "5f0c2a7e-8b1d-4c3e-9a26-0d7e4b9f1c38"}
	own := map[string]string{cdv1beta1.ControlPlaneLabel: id, cdv1beta1.ComputeDomainLabel: "5f0c2a7e-8b1d-4c3e-9a26-0d7e4b9f1c38"}
	gpu := exactly("gpu.example.com")
	const refusal = "are written by a control plane's controller (for its own plane) and kube-controller-manager"
	eventuallyRefused(t, "a tenant's claim labelled for another plane", func() error {
		_, err := tenantCS.ResourceV1().ResourceClaims(ns).Create(ctx, labelled(deviceClaim(ns, "probe", gpu), planeB), dryRun)
		return err
	})
	templateWithClaimLabels := func(l map[string]string) *resourcev1.ResourceClaimTemplate {
		tmpl := claimTemplate(ns, "t", gpu)
		tmpl.Spec.Labels = l
		return tmpl
	}
	ownTemplate := func(l map[string]string) *resourcev1.ResourceClaimTemplate {
		tmpl := claimTemplate(ns, "t", exactly(cdv1beta1.ChannelDeviceClass, planeSelector(id)))
		tmpl.Labels, tmpl.Spec.Labels = l, l
		return tmpl
	}
	for what, tc := range map[string]struct {
		create func() error
		ok     bool
	}{
		"a tenant's claim labelled for another plane": {create: func() error {
			_, err := tenantCS.ResourceV1().ResourceClaims(ns).Create(ctx, labelled(deviceClaim(ns, "c", gpu), planeB), dryRun)
			return err
		}},
		"a tenant's claim labelled for a domain": {create: func() error {
			_, err := tenantCS.ResourceV1().ResourceClaims(ns).Create(ctx, labelled(deviceClaim(ns, "c", gpu), domainX), dryRun)
			return err
		}},
		"a tenant's template whose claims would be labelled": {create: func() error {
			_, err := tenantCS.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, templateWithClaimLabels(planeB), dryRun)
			return err
		}},
		"a tenant's claim without them": {ok: true, create: func() error {
			_, err := tenantCS.ResourceV1().ResourceClaims(ns).Create(ctx, labelled(deviceClaim(ns, "c", gpu), map[string]string{"app": "x"}), dryRun)
			return err
		}},
		"kube-controller-manager copying a template's labels": {ok: true, create: func() error {
			_, err := kcm.ResourceV1().ResourceClaims(ns).Create(ctx, labelled(deviceClaim(ns, "c", exactly(cdv1beta1.ChannelDeviceClass, planeSelector(id))), own), dryRun)
			return err
		}},
		"the plane's controller labelling its template for its plane": {ok: true, create: func() error {
			_, err := controller.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, ownTemplate(own), dryRun)
			return err
		}},
		"the plane's controller labelling a template for another plane": {create: func() error {
			_, err := controller.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, ownTemplate(planeB), dryRun)
			return err
		}},
	} {
		err := tc.create()
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v, want admitted", what, err)
		case !tc.ok && (!isAdmissionRefusal(err) || !strings.Contains(err.Error(), refusal)):
			t.Errorf("%s: %v, want the claim-labels policy's refusal", what, err)
		}
	}
}
