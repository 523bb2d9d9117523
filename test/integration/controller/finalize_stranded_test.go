package controller

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller"
	"cdplane/internal/controller/computedomain"
	"cdplane/internal/lifecycle"
	"cdplane/internal/testutil"
)

// TestStrandedDomainIsFinalized: a forced unassign (or the namespace being deleted) takes the
// plane's label and RoleBindings from a namespace while a domain with a finalizer lives there.
// The controller, running as its own service account with the chart's RBAC, can no longer
// delete the domain's claim template there; it still finalizes the domain (its ComputeDomain
// rights do not depend on the namespace) and leaves the template to the garbage collector.
func TestStrandedDomainIsFinalized(t *testing.T) {
	t.Parallel()
	const id = "stranded"
	ctx := context.Background()
	driverNS, cfg := installControllerRBAC(t, id)
	ns := testCluster.Namespace(t, nil)
	if _, err := lifecycle.Assign(ctx, testCluster.Client, id, lifecycle.Target{Kind: lifecycle.KindNamespace, Name: ns}); err != nil {
		t.Fatal(err)
	}
	mgr, err := controller.NewManager(ctx, cfg, controller.Options{
		Options:            computedomain.Options{DriverNamespace: driverNS, DaemonImage: "cdplane:test", ControlPlaneID: id},
		SkipNameValidation: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	testutil.RunManager(t, mgr)

	// The prerequisites' policy would stamp the plane label; this suite runs without it.
	cd := testutil.MakeComputeDomain("job").Namespace(ns).NumNodes(1).Label(cdv1beta1.ControlPlaneLabel, id).Obj()
	if err := testCluster.Client.Create(ctx, cd); err != nil {
		t.Fatal(err)
	}
	template := &resourcev1.ResourceClaimTemplate{}
	testutil.Eventually(t, time.Minute, "the controller creates the domain's claim template", func() (bool, error) {
		err := testCluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: cd.Spec.Channel.ResourceClaimTemplate.Name}, template)
		return err == nil, client.IgnoreNotFound(err)
	})

	// The forced unassign: the label and the plane's RoleBindings go.
	if err := testCluster.Client.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+cdv1beta1.ControlPlaneLabel+`":null}}}`))); err != nil {
		t.Fatal(err)
	}
	if err := testCluster.Client.DeleteAllOf(ctx, &rbacv1.RoleBinding{}, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	// RBAC reads bindings from a cache: wait until the controller has lost its rights there.
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the controller loses its rights in the namespace", func() (bool, error) {
		err := cs.ResourceV1().ResourceClaimTemplates(ns).Delete(ctx, template.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err), nil
	})

	if err := testCluster.Client.Delete(ctx, cd); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the stranded domain is finalized", func() (bool, error) {
		err := testCluster.Client.Get(ctx, client.ObjectKeyFromObject(cd), &cdv1beta1.ComputeDomain{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}
