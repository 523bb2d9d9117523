package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	charts "cdplane/deployments/helm"
	"cdplane/internal/controller"
	"cdplane/internal/controller/cleanup"
	"cdplane/internal/lifecycle"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
)

// installControllerRBAC creates plane id's driver namespace, its controller's service account
// and the objects of the plane chart's rbac-controller.yaml, as `cdplane install plane` would,
// and returns the driver namespace and a config that acts as the controller's service account.
func installControllerRBAC(t *testing.T, id string) (string, *rest.Config) {
	t.Helper()
	ctx := context.Background()
	release, ns := lifecycle.PlaneRelease(id)
	ms, err := charts.Render(charts.Plane, release, ns, testutil.WithImage(map[string]any{"controlPlaneID": id}))
	if err != nil {
		t.Fatal(err)
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{cdv1beta1.ControlPlaneLabel: id}}}
	if err := testCluster.Client.Create(ctx, nsObj); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testCluster.Client.Delete(context.Background(), nsObj) })
	sa := plane.Name(id, "cdplane-controller")
	for _, m := range ms {
		o := m.Object
		isSA := o.GetKind() == "ServiceAccount" && o.GetName() == sa
		if !isSA && !strings.HasSuffix(m.Template, "/rbac-controller.yaml") {
			continue
		}
		if err := testCluster.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: creating %s %s: %v", m.Template, o.GetKind(), o.GetName(), err)
		}
		if o.GetNamespace() == "" {
			t.Cleanup(func() { _ = testCluster.Client.Delete(context.Background(), o) })
		}
	}
	cfg := rest.CopyConfig(testCluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: fmt.Sprintf("system:serviceaccount:%s:%s", ns, sa)}
	return ns, cfg
}

// orphanTemplate creates a ResourceClaimTemplate labelled as plane id's controller labels
// what it creates, for a domain that does not exist.
func orphanTemplate(t *testing.T, ns, name, id string) *resourcev1.ResourceClaimTemplate {
	t.Helper()
	rct := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: ns,
		Labels: plane.Stamp(id, map[string]string{
			cdv1beta1.ComputeDomainLabel: string(uuid.NewUUID()), "app.kubernetes.io/managed-by": "cdplane",
		}),
	}}
	if err := testCluster.Client.Create(context.Background(), rct); err != nil {
		t.Fatal(err)
	}
	return rct
}

// staleNode creates a node of plane id labelled for a domain that does not exist.
func staleNode(t *testing.T, name, id string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name, Labels: plane.Stamp(id, map[string]string{cdv1beta1.ComputeDomainLabel: string(uuid.NewUUID())}),
	}}
	if err := testCluster.Client.Create(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testCluster.Client.Delete(context.Background(), n) })
	return n
}

func domainLabelOf(n *corev1.Node) (string, error) {
	cur := &corev1.Node{}
	err := testCluster.Client.Get(context.Background(), client.ObjectKeyFromObject(n), cur)
	return cur.Labels[cdv1beta1.ComputeDomainLabel], err
}

func exists(obj client.Object) (bool, error) {
	err := testCluster.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj.DeepCopyObject().(client.Object))
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// TestCleanupTrustsLabelsOnlyInOwnedNamespaces: a tenant of a namespace plane cleanup-ns does
// not own creates a ResourceClaimTemplate that looks like one of the plane's orphans (domain,
// managed-by and plane labels). A pass of the plane's cleanup, run as the plane's controller
// with the chart's RBAC:
//   - leaves the look-alike alone without even trying (no request to its namespace);
//   - still deletes the plane's orphan in an assigned namespace and removes the stale label of
//     the plane's node;
//   - fails for an orphan in a namespace labelled for the plane that the controller cannot write
//     in (no RoleBinding: 403), and goes on: the pass returns that failure, named, with the
//     others done.
func TestCleanupTrustsLabelsOnlyInOwnedNamespaces(t *testing.T) {
	t.Parallel()
	const id = "cleanup-ns"
	ctx := context.Background()
	driverNS, cfg := installControllerRBAC(t, id)
	owned := testCluster.Namespace(t, nil)
	if _, err := lifecycle.Assign(ctx, testCluster.Client, id, lifecycle.Target{Kind: lifecycle.KindNamespace, Name: owned}); err != nil {
		t.Fatal(err)
	}
	unbound := testCluster.Namespace(t, map[string]string{cdv1beta1.ControlPlaneLabel: id})
	foreign := testCluster.Namespace(t, nil)

	fake := orphanTemplate(t, foreign, "fake", id)
	orphan := orphanTemplate(t, owned, "orphan", id)
	unwritable := orphanTemplate(t, unbound, "unwritable", id)
	node := staleNode(t, "cleanup-ns-"+owned[len(owned)-5:], id)

	writes := &writeLog{}
	sa, err := client.New(writes.wrap(cfg, "cdplane-cleanup-test"), client.Options{Scheme: testCluster.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the controller's RBAC in force", func() (bool, error) {
		err := sa.List(ctx, &resourcev1.ResourceClaimTemplateList{}, client.HasLabels{cdv1beta1.ComputeDomainLabel})
		return err == nil, err
	})
	c := &cleanup.Cleaner{Client: sa, APIReader: sa, DriverNamespace: driverNS, ControlPlaneID: id}
	removed, err := c.RunOnce(ctx)

	if err == nil || !strings.Contains(err.Error(), unbound+"/unwritable") || !apierrors.IsForbidden(err) {
		t.Errorf("pass error %v, want the forbidden delete of %s/unwritable", err, unbound)
	}
	if err != nil && strings.Contains(err.Error(), foreign) {
		t.Errorf("pass error %v names the tenant's namespace %s", err, foreign)
	}
	if removed != 2 {
		t.Errorf("pass removed %d, want 2 (the orphan template and the node label)", removed)
	}
	for _, w := range writes.list() {
		if strings.Contains(w, "/namespaces/"+foreign+"/") {
			t.Errorf("the cleanup sent %s into a namespace the plane does not own", w)
		}
	}
	for obj, want := range map[client.Object]bool{fake: true, orphan: false, unwritable: true} {
		if got, err := exists(obj); err != nil || got != want {
			t.Errorf("%s exists=%v (err=%v), want %v", klogKey(obj), got, err, want)
		}
	}
	if l, err := domainLabelOf(node); err != nil || l != "" {
		t.Errorf("stale node label %q (err=%v) after the pass, want it removed", l, err)
	}
}

// TestLegacyCleanupLeavesAssignedNamespacesAlone: the legacy plane's controller may write in
// every namespace, but owns only those without the plane label; an unlabelled look-alike
// orphan in a namespace assigned to a plane is not its own, and a pass leaves it.
func TestLegacyCleanupLeavesAssignedNamespacesAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	assigned := testCluster.Namespace(t, map[string]string{cdv1beta1.ControlPlaneLabel: "cleanup-other"})
	legacy := testCluster.Namespace(t, nil)
	fake := orphanTemplate(t, assigned, "fake", "")
	orphan := orphanTemplate(t, legacy, "orphan", "")

	c := &cleanup.Cleaner{Client: testCluster.Client, APIReader: testCluster.Client, DriverNamespace: testCluster.Namespace(t, nil)}
	if _, err := c.RunOnce(ctx); err != nil {
		t.Errorf("legacy pass: %v", err)
	}
	for obj, want := range map[client.Object]bool{fake: true, orphan: false} {
		if got, err := exists(obj); err != nil || got != want {
			t.Errorf("%s exists=%v (err=%v), want %v", klogKey(obj), got, err, want)
		}
	}
}

func klogKey(obj client.Object) string { return obj.GetNamespace() + "/" + obj.GetName() }

// TestCleanupRunsWhenADomainIsDeleted: with a cleanup interval of an hour, a stale domain
// label on one of the plane's nodes goes soon after a ComputeDomain of the plane is deleted,
// not at the next interval.
func TestCleanupRunsWhenADomainIsDeleted(t *testing.T) {
	t.Parallel()
	const id = "cleanup-trig"
	suffix := string(uuid.NewUUID())[:8]
	// The pass at start-up removes this one: once it has, that pass is over.
	first := staleNode(t, "cleanup-trig-first-"+suffix, id)
	e := newEnv(t, true, func(o *controller.Options) { o.ControlPlaneID, o.CleanupInterval = id, time.Hour })
	ns := &corev1.Namespace{}
	if err := e.c.Get(e.ctx(), client.ObjectKey{Name: e.ns}, ns); err != nil {
		t.Fatal(err)
	}
	ns.Labels = plane.Stamp(id, ns.Labels)
	if err := e.c.Update(e.ctx(), ns); err != nil {
		t.Fatal(err)
	}
	e.eventually(time.Minute, "the start-up pass removing the first stale label", func() (bool, error) {
		l, err := domainLabelOf(first)
		return l == "", err
	})

	second := staleNode(t, "cleanup-trig-second-"+suffix, id)
	cd := testutil.MakeComputeDomain("gone").Namespace(e.ns).Label("cdplane.test/env", e.selector).
		Label(cdv1beta1.ControlPlaneLabel, id).Obj()
	if err := e.c.Create(e.ctx(), cd); err != nil {
		t.Fatal(err)
	}
	e.eventually(time.Minute, "the domain's finalizer", func() (bool, error) {
		got := &cdv1beta1.ComputeDomain{}
		err := e.c.Get(context.Background(), client.ObjectKeyFromObject(cd), got)
		return len(got.Finalizers) > 0, err
	})
	if err := e.c.Delete(e.ctx(), cd); err != nil {
		t.Fatal(err)
	}
	e.eventually(time.Minute, "the second stale label removed after the domain's deletion", func() (bool, error) {
		l, err := domainLabelOf(second)
		return l == "", err
	})
}
