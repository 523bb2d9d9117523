package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller"
	"cdplane/internal/controller/domainlabel"
	"cdplane/internal/testutil"
)

// TestControllerLabelsDomainsWithoutMutatingPolicy: where no MutatingAdmissionPolicy stamps a
// ComputeDomain's plane label (Kubernetes before 1.36; this cluster runs no admission policy at
// all), the plane's controller labels the unlabelled domains of the namespaces assigned to it
// and then reconciles them; domains in another plane's namespace or in an unassigned one keep
// no label, and the legacy plane, which selects unlabelled domains, leaves alone the one whose
// namespace is assigned to a named plane.
func TestControllerLabelsDomainsWithoutMutatingPolicy(t *testing.T) {
	t.Parallel()
	const id, otherID = "labeller-a", "labeller-b"
	e := newEnv(t, true, func(o *controller.Options) { o.ControlPlaneID, o.LabelDomains = id, domainlabel.Always })
	// The legacy plane's controller, selecting this test's domains too.
	newEnv(t, true, func(o *controller.Options) {
		o.DomainSelector = labels.SelectorFromSet(labels.Set{"cdplane.test/env": e.selector})
	})
	assigned := testCluster.Namespace(t, map[string]string{cdv1beta1.ControlPlaneLabel: id})
	foreign := testCluster.Namespace(t, map[string]string{cdv1beta1.ControlPlaneLabel: otherID})

	create := func(name, ns string) *cdv1beta1.ComputeDomain {
		t.Helper()
		cd := testutil.MakeComputeDomain(name).Namespace(ns).Label("cdplane.test/env", e.selector).Obj()
		if err := e.c.Create(e.ctx(), cd); err != nil {
			t.Fatal(err)
		}
		return cd
	}
	get := func(cd *cdv1beta1.ComputeDomain) (*cdv1beta1.ComputeDomain, error) {
		cur := &cdv1beta1.ComputeDomain{}
		return cur, e.c.Get(e.ctx(), client.ObjectKeyFromObject(cd), cur)
	}
	inForeign := create("foreign", foreign)
	inAssigned := create("assigned", assigned)
	inLegacy := create("legacy", e.ns)

	e.eventually(2*time.Minute, "the domain in the assigned namespace labelled for the plane and taken (finalizer)", func() (bool, error) {
		cur, err := get(inAssigned)
		return err == nil && cur.Labels[cdv1beta1.ControlPlaneLabel] == id && controllerutil.ContainsFinalizer(cur, cdv1beta1.Finalizer), err
	})
	// The legacy plane takes the domain of the unassigned namespace: it has reconciled what it
	// was given by then (the foreign one was created first).
	e.eventually(2*time.Minute, "the domain in the unassigned namespace taken by the legacy plane", func() (bool, error) {
		cur, err := get(inLegacy)
		return err == nil && controllerutil.ContainsFinalizer(cur, cdv1beta1.Finalizer), err
	})
	if cur, err := get(inLegacy); err != nil || cur.Labels[cdv1beta1.ControlPlaneLabel] != "" {
		t.Errorf("domain in an unassigned namespace: labels %v (err %v), want no plane label", cur.Labels, err)
	}
	cur, err := get(inForeign)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := cur.Labels[cdv1beta1.ControlPlaneLabel]; ok || len(cur.Finalizers) > 0 {
		t.Errorf("domain in plane %s's namespace (whose controller does not run): label %q, finalizers %v; want neither plane %s nor the legacy plane to touch it",
			otherID, v, cur.Finalizers, id)
	}
}
