package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	charts "cdplane/deployments/helm"
	"cdplane/internal/lifecycle"
	"cdplane/internal/plane"
	"cdplane/internal/scheme"
	"cdplane/internal/testutil"
)

func mustNot(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one containing %q", err, want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// assign assigns a fresh namespace to plane id, as `cdplane assign namespace` does.
func assign(t *testing.T, id string) string {
	t.Helper()
	ns := testCluster.Namespace(t, nil)
	if _, err := lifecycle.Assign(context.Background(), testCluster.Client, id, lifecycle.Target{Kind: lifecycle.KindNamespace, Name: ns}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// clusterNames returns "Kind name" of every cluster-scoped object the plane chart renders for id.
func clusterNames(t *testing.T, id string) []*unstructured.Unstructured {
	t.Helper()
	release, ns := lifecycle.PlaneRelease(id)
	ms, err := charts.Render(charts.Plane, release, ns, testutil.WithImage(map[string]any{"controlPlaneID": id}))
	must(t, err)
	var out []*unstructured.Unstructured
	for _, m := range ms {
		if m.Object.GetNamespace() == "" {
			out = append(out, m.Object)
		}
	}
	return out
}

func crdVersions(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range []string{"computedomains.resource.nvidia.com", "computedomaincliques.resource.nvidia.com"} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		must(t, testCluster.Client.Get(context.Background(), client.ObjectKey{Name: name}, crd))
		out[name] = crd.ResourceVersion
	}
	return out
}

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	m, out := newManager(t)
	playKubelet(t, "plane-a", "plane-b")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cdplane output:\n%s", out.String())
		}
	})

	// Prerequisites, once.
	must(t, m.InstallPrerequisites(ctx, nil))
	mustNot(t, m.InstallPrerequisites(ctx, nil), "already installed")
	if !strings.Contains(out.String(), "Waiting for the ComputeDomain API and its admission policies to be served") {
		t.Errorf("no progress shown while waiting for the prerequisites:\n%s", out.String())
	}

	// A plane whose namespace another plane owns: refused, nothing changed.
	foreign := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plane-c-cdplane", Labels: map[string]string{cdv1beta1.ControlPlaneLabel: "plane-b"}}}
	must(t, testCluster.Client.Create(ctx, foreign))
	before := labelled(t, "plane-c")
	mustNot(t, m.InstallPlane(ctx, "plane-c", testutil.WithImage(nil)), `namespace plane-c-cdplane is labelled resource.nvidia.com/control-plane-id=plane-b for control plane "plane-b"`)
	if diff := cmp.Diff(before, labelled(t, "plane-c")); diff != "" {
		t.Errorf("a refused install changed plane-c objects:\n%s", diff)
	}
	for _, o := range clusterNames(t, "plane-c") {
		cur := o.DeepCopy()
		if err := testCluster.Client.Get(ctx, client.ObjectKeyFromObject(o), cur); !apierrors.IsNotFound(err) {
			t.Errorf("after a refused install, %s %s: %v, want NotFound", o.GetKind(), o.GetName(), err)
		}
	}
	must(t, testCluster.Client.Delete(ctx, foreign))
	testutil.Eventually(t, time.Minute, "namespace plane-c-cdplane gone", func() (bool, error) {
		err := testCluster.Client.Get(ctx, client.ObjectKeyFromObject(foreign), &corev1.Namespace{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	// The secret-mirror source namespace counts too.
	mustNot(t, m.InstallPlane(ctx, "plane-d", testutil.WithImage(map[string]any{"secretMirror": map[string]any{"selector": "a=b", "sourceNamespace": "kube-system"}})),
		"namespace kube-system exists without the label resource.nvidia.com/control-plane-id=plane-d")

	// Monitoring switched on in a cluster without the Prometheus operator's CRDs: refused
	// before any change, naming the kinds and the values that render them.
	before = labelled(t, "plane-e")
	mustNot(t, m.InstallPlane(ctx, "plane-e", testutil.WithImage(map[string]any{"monitoring": map[string]any{
		"podMonitor": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true},
	}})), "the cluster does not serve PodMonitor (monitoring.coreos.com/v1")
	mustNot(t, m.InstallPlane(ctx, "plane-e", testutil.WithImage(map[string]any{"monitoring": map[string]any{"prometheusRule": map[string]any{"enabled": true}}})),
		"PrometheusRule (monitoring.coreos.com/v1")
	if diff := cmp.Diff(before, labelled(t, "plane-e")); diff != "" {
		t.Errorf("a refused install changed plane-e objects:\n%s", diff)
	}
	if err := testCluster.Client.Get(ctx, client.ObjectKey{Name: "plane-e-cdplane"}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Errorf("after a refused install, namespace plane-e-cdplane: %v, want NotFound", err)
	}

	// Two planes; apply before install and install twice are refused.
	mustNot(t, m.ApplyPlane(ctx, "plane-a", nil, lifecycle.KeepValues), "not installed")
	// plane-a mirrors Secrets (so its controller has Secrets rights), plane-b does not.
	must(t, m.InstallPlane(ctx, "plane-a", testutil.WithImage(map[string]any{"secretMirror": map[string]any{"selector": "lifecycle.test/mirror=yes"}})))
	must(t, m.InstallPlane(ctx, "plane-b", testutil.WithImage(nil)))
	mustNot(t, m.InstallPlane(ctx, "plane-b", testutil.WithImage(nil)), "already installed")
	nsA, nsB := assign(t, "plane-a"), assign(t, "plane-b")

	t.Run("rbac: a plane's service accounts stay out of another plane's Secrets and cliques", func(t *testing.T) {
		checkRBAC(t, nsA, nsB)
	})
	t.Run("apf: the controller's lease requests in leader-election, the rest in workload-high", func(t *testing.T) {
		checkPriorityLevels(t, "plane-a")
	})

	stopA, stopB := runController(t, "plane-a"), runController(t, "plane-b")
	defer stopB()
	cdA := readyDomain(t, "plane-a", nsA, "job-a")
	cdB := readyDomain(t, "plane-b", nsB, "job-b")
	planeB, crds := labelled(t, "plane-b"), crdVersions(t)
	if len(planeB) < 10 {
		t.Fatalf("only %d objects carry the plane-b label: %v", len(planeB), planeB)
	}

	// Upgrade plane-a while plane-b serves a live domain: plane-b untouched, still Ready.
	must(t, m.ApplyPlane(ctx, "plane-a", map[string]any{"logVerbosity": 3}, lifecycle.KeepValues))
	waitReady(t, cdB)
	if diff := cmp.Diff(planeB, labelled(t, "plane-b")); diff != "" {
		t.Errorf("upgrading plane-a changed plane-b objects (-before +after):\n%s", diff)
	}

	// Destroy plane-a: refused with a live domain, nothing changed.
	planeA := labelled(t, "plane-a")
	mustNot(t, m.DestroyPlane(ctx, "plane-a", false), "still has 1 ComputeDomains: "+nsA+"/job-a")
	if diff := cmp.Diff(planeA, labelled(t, "plane-a")); diff != "" {
		t.Errorf("a refused destroy changed plane-a objects:\n%s", diff)
	}

	// With --delete-domains: the domain's finalizer runs (its DaemonSet and templates go),
	// then nothing of plane-a is left, and plane-b and the CRDs are untouched.
	endWorkload(t, cdA)
	must(t, m.DestroyPlane(ctx, "plane-a", true))
	stopA()
	if err := testCluster.Client.Get(ctx, client.ObjectKeyFromObject(cdA), &cdv1beta1.ComputeDomain{}); !apierrors.IsNotFound(err) {
		t.Errorf("plane-a's domain after destroy: %v, want NotFound", err)
	}
	if left := labelled(t, "plane-a"); len(left) > 0 {
		t.Errorf("objects carrying the plane-a label after destroy: %v", left)
	}
	for _, o := range clusterNames(t, "plane-a") {
		cur := o.DeepCopy()
		if err := testCluster.Client.Get(ctx, client.ObjectKeyFromObject(o), cur); !apierrors.IsNotFound(err) {
			t.Errorf("after destroy, %s %s: %v, want NotFound", o.GetKind(), o.GetName(), err)
		}
	}
	if diff := cmp.Diff(planeB, labelled(t, "plane-b")); diff != "" {
		t.Errorf("destroying plane-a changed plane-b objects (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(crds, crdVersions(t)); diff != "" {
		t.Errorf("destroying plane-a changed the CRDs:\n%s", diff)
	}
	waitReady(t, cdB)
	for _, want := range []string{"Waiting for the ComputeDomains' finalizers", "Uninstalling Helm release plane-a-cdplane/plane-a-cdplane", "Waiting for namespace plane-a-cdplane to be gone"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("destroy output lacks %q", want)
		}
	}

	// The prerequisites stay while plane-b is installed.
	mustNot(t, m.DestroyPrerequisites(ctx), `control planes are still installed: control plane "plane-b" (release plane-b-cdplane/plane-b-cdplane)`)
	endWorkload(t, cdB)
	must(t, m.DestroyPlane(ctx, "plane-b", true))
	stopB()
	must(t, m.DestroyPrerequisites(ctx))
	if err := testCluster.Client.Get(ctx, client.ObjectKey{Name: "computedomains.resource.nvidia.com"}, &apiextensionsv1.CustomResourceDefinition{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ComputeDomain CRD after destroying the prerequisites: %v", err)
	}
	if left := labelled(t, "plane-b"); len(left) > 0 {
		t.Errorf("objects carrying the plane-b label after destroy: %v", left)
	}
}

// checkRBAC impersonates each service account of plane-b against plane-a's Secrets and
// cliques (and the reverse for one positive control), through the real apiserver's RBAC.
func checkRBAC(t *testing.T, nsA, nsB string) {
	ctx := context.Background()
	driverA := plane.Name("plane-a", plane.DriverNamespaceLegacyName)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: driverA}, StringData: map[string]string{"k": "v"}}
	must(t, testCluster.Client.Create(ctx, secret))
	copyInA := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: nsA}, StringData: map[string]string{"k": "v"}}
	must(t, testCluster.Client.Create(ctx, copyInA))
	clique := testutil.MakeClique("uid-a.clique", driverA).Obj()
	clique.Labels = plane.Stamp("plane-a", nil)
	must(t, testCluster.Client.Create(ctx, clique))

	as := func(id, sa string) client.Client {
		c, err := client.New(serviceAccount(id, sa), client.Options{Scheme: scheme.New()})
		must(t, err)
		return c
	}
	for _, sa := range []string{"cdplane-controller", "cdplane-daemon", "cdplane-kubelet-plugin"} {
		c := as("plane-b", sa)
		for _, ns := range []string{driverA, nsA} {
			forbidden(t, "plane-b "+sa+" get Secret "+ns+"/creds", c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "creds"}, &corev1.Secret{}))
			forbidden(t, "plane-b "+sa+" list Secrets in "+ns, c.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)))
		}
		forbidden(t, "plane-b "+sa+" list Secrets cluster-wide", c.List(ctx, &corev1.SecretList{}))
		patched := clique.DeepCopy()
		patched.Labels["tampered"] = "yes"
		forbidden(t, "plane-b "+sa+" update clique", c.Update(ctx, patched))
		forbidden(t, "plane-b "+sa+" delete clique", c.Delete(ctx, clique.DeepCopy()))
		forbidden(t, "plane-b "+sa+" create clique in plane-a's namespace", c.Create(ctx, testutil.MakeClique("forged", driverA).Obj()))
	}
	// Positive controls: plane-a's controller reaches its own Secrets and cliques, and
	// plane-b's its own assigned namespace.
	ca := as("plane-a", "cdplane-controller")
	must(t, ca.Get(ctx, client.ObjectKeyFromObject(secret), &corev1.Secret{}))
	must(t, ca.Get(ctx, client.ObjectKeyFromObject(copyInA), &corev1.Secret{}))
	must(t, ca.Get(ctx, client.ObjectKeyFromObject(clique), &cdv1beta1.ComputeDomainClique{}))
	// plane-b mirrors nothing: no Secrets rights even in its own namespaces.
	forbidden(t, "plane-b controller list Secrets in its own namespace without mirroring",
		as("plane-b", "cdplane-controller").List(ctx, &corev1.SecretList{}, client.InNamespace(nsB)))
	forbidden(t, "plane-b controller list Secrets in its driver namespace without mirroring",
		as("plane-b", "cdplane-controller").List(ctx, &corev1.SecretList{}, client.InNamespace(plane.Name("plane-b", plane.DriverNamespaceLegacyName))))

	// ResourceSlices: a plane's kubelet plugin writes only its own node's (the node comes from
	// its pod-bound token), only for driver compute-domain.nvidia.com.
	pluginOn := func(node string) client.Client {
		cfg := serviceAccount("plane-b", "cdplane-kubelet-plugin")
		if node != "" {
			cfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
		}
		c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
		must(t, err)
		return c
	}
	slice := func(name, node, driver string) *resourcev1.ResourceSlice {
		return &resourcev1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourcev1.ResourceSliceSpec{Driver: driver, NodeName: &node,
				Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1}},
		}
	}
	testutil.Eventually(t, 30*time.Second, "the ResourceSlice policy refuses another node's slice", func() (bool, error) {
		err := pluginOn("node-x").Create(ctx, slice("rbac-other-node", "node-y", "compute-domain.nvidia.com"))
		if err == nil {
			_ = testCluster.Client.Delete(ctx, slice("rbac-other-node", "node-y", ""))
			return false, nil
		}
		if !strings.Contains(err.Error(), "may only write the ResourceSlices of its own node (node-x), not node node-y") {
			return false, err
		}
		return true, nil
	})
	own := slice("rbac-own-node", "node-x", "compute-domain.nvidia.com")
	must(t, pluginOn("node-x").Create(ctx, own))
	must(t, pluginOn("node-x").Delete(ctx, own))
	if err := pluginOn("").Create(ctx, slice("rbac-no-node", "node-x", "compute-domain.nvidia.com")); err == nil || !strings.Contains(err.Error(), "no node in its token") {
		t.Errorf("a plugin token without a node wrote a slice: %v", err)
	}
	if err := pluginOn("node-x").Create(ctx, slice("rbac-other-driver", "node-x", "gpu.nvidia.com")); err == nil || !strings.Contains(err.Error(), "may not write ResourceSlices of driver gpu.nvidia.com") {
		t.Errorf("a plugin wrote another driver's slice: %v", err)
	}

	// Labels: plane-b's controller, a namespace editor and a user whom RBAC lets change
	// namespaces and nodes cannot set, change or remove a plane label on a namespace or node.
	// Each refusal is asserted for what it is: RBAC's where the identity lacks the right, an
	// admission policy's where it has it (admission is then all that stands in the way).
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "rbac-node-" + nsA, Labels: plane.Stamp("plane-a", nil)}}
	must(t, testCluster.Client.Create(ctx, node))
	t.Cleanup(func() { _ = testCluster.Client.Delete(context.Background(), node) })
	must(t, testCluster.Client.Create(ctx, rolebinding(nsB, "tenant-edit", "edit", "tenant")))
	tenant := asUser(t, "tenant")
	labelEditor := asUser(t, "label-editor-"+nsA)
	must(t, testCluster.Client.Create(ctx, labelEditorRole(nsA)))
	must(t, testCluster.Client.Create(ctx, clusterRoleBinding("label-editor-"+nsA, "label-editor-"+nsA, "label-editor-"+nsA)))
	t.Cleanup(func() {
		_ = testCluster.Client.Delete(context.Background(), labelEditorRole(nsA))
		_ = testCluster.Client.Delete(context.Background(), clusterRoleBinding("label-editor-"+nsA, "", ""))
	})
	const (
		byRBAC   = "rbac"
		byPolicy = "policy"
	)
	for _, tc := range []struct {
		who       string
		c         client.Client
		namespace string // who refuses a change on a namespace
		node      string // who refuses a change on a node
	}{
		{"plane-b controller", as("plane-b", "cdplane-controller"), byRBAC, byPolicy},
		{"tenant editor", tenant, byRBAC, byRBAC},
		{"label editor", labelEditor, byPolicy, byPolicy},
	} {
		for _, target := range []struct {
			obj client.Object
			by  string
		}{{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsA}}, tc.namespace}, {node.DeepCopy(), tc.node}} {
			kind := "namespaces"
			if _, ok := target.obj.(*corev1.Node); ok {
				kind = "nodes"
			}
			// RBAC would be checked first anyway; make sure the expectation matches the grant.
			if allowed := canPatch(t, tc.c, kind); allowed != (target.by == byPolicy) {
				t.Fatalf("%s may patch %s: %v; the test expects a refusal by %s", tc.who, kind, allowed, target.by)
			}
			for change, value := range map[string]*string{"change": ptr("plane-b"), "remove": nil} {
				what := fmt.Sprintf("%s: %s the plane label of %s %s", tc.who, change, kind, target.obj.GetName())
				err := tc.c.Patch(ctx, target.obj.DeepCopyObject().(client.Object), client.RawPatch(types.MergePatchType, labelPatch(value)))
				switch {
				case err == nil:
					t.Errorf("%s: admitted", what)
				case target.by == byRBAC && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `cannot patch resource "`+kind+`"`)):
					t.Errorf("%s: %v, want RBAC's refusal", what, err)
				case target.by == byPolicy && (!apierrors.IsForbidden(err) || !isLabelPolicyRefusal(err)):
					t.Errorf("%s: %v, want an admission policy's refusal", what, err)
				}
				if got := planeLabel(t, target.obj); got != "plane-a" {
					t.Errorf("%s: the label reads %q on a fresh GET, want plane-a", what, got)
				}
			}
		}
	}
	// The refusals are about the plane label, not the identities: plane-b's controller removes
	// the domain label from a plane-b node (its job when a domain goes), visible on a fresh GET.
	ownNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "rbac-own-node-" + nsA,
		Labels: plane.Stamp("plane-b", map[string]string{cdv1beta1.ComputeDomainLabel: "5a1e0c6b-7d7e-4b8e-9f00-00000000000b"})}}
	must(t, testCluster.Client.Create(ctx, ownNode))
	t.Cleanup(func() { _ = testCluster.Client.Delete(context.Background(), ownNode) })
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, cdv1beta1.ComputeDomainLabel)
	if err := as("plane-b", "cdplane-controller").Patch(ctx, ownNode.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Errorf("plane-b's controller removing the domain label of its node: %v", err)
	} else {
		cur := &corev1.Node{}
		must(t, testCluster.Client.Get(ctx, client.ObjectKeyFromObject(ownNode), cur))
		if got, ok := cur.Labels[cdv1beta1.ComputeDomainLabel]; ok {
			t.Errorf("plane-b's controller removed the domain label of its node, admitted: a fresh GET reads %q", got)
		}
	}

	// A forged label on a new ComputeDomain: the tenant, allowed to create ComputeDomains in
	// its namespace (edit does not cover the CRD; a role does), gets its domain admitted with
	// its namespace's plane stamped, as a fresh GET shows; relabelling it is admitted and
	// stamped back. plane-b's controller may not create ComputeDomains at all (RBAC).
	must(t, testCluster.Client.Create(ctx, domainEditorRole(nsA)))
	t.Cleanup(func() { _ = testCluster.Client.Delete(context.Background(), domainEditorRole(nsA)) })
	must(t, testCluster.Client.Create(ctx, rolebindingTo(nsB, "tenant-domains", "ClusterRole", domainEditorRole(nsA).GetName(), "tenant")))
	forged := testutil.MakeComputeDomain("forged-tenant").Namespace(nsB).Label(cdv1beta1.ControlPlaneLabel, "plane-a").Obj()
	// The binding reaches the authorizer's cache a moment after it was created: a Forbidden
	// meanwhile is retried, anything else is an answer.
	var createErr error
	testutil.Eventually(t, 30*time.Second, "the tenant's new role in effect", func() (bool, error) {
		createErr = tenant.Create(ctx, forged.DeepCopy())
		return !apierrors.IsForbidden(createErr) || !strings.Contains(createErr.Error(), "cannot create resource"), nil
	})
	if createErr != nil {
		t.Errorf("tenant creating a ComputeDomain in its namespace: %v", createErr)
	} else {
		if got := planeLabel(t, forged); got != "plane-b" {
			t.Errorf("tenant's ComputeDomain created with label plane-a in plane-b's namespace: a fresh GET reads %q, want plane-b", got)
		}
		err := tenant.Patch(ctx, forged.DeepCopy(), client.RawPatch(types.MergePatchType, labelPatch(ptr("plane-a"))))
		if err != nil {
			t.Errorf("tenant relabelling its ComputeDomain: %v, want admitted and stamped back", err)
		}
		if got := planeLabel(t, forged); got != "plane-b" {
			t.Errorf("tenant relabelled its ComputeDomain plane-a: a fresh GET reads %q, want plane-b", got)
		}
		must(t, testCluster.Client.Delete(ctx, forged))
	}
	byController := testutil.MakeComputeDomain("forged-controller").Namespace(nsB).Label(cdv1beta1.ControlPlaneLabel, "plane-a").Obj()
	if err := as("plane-b", "cdplane-controller").Create(ctx, byController); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `cannot create resource "computedomains"`) {
		t.Errorf("plane-b's controller creating a ComputeDomain: %v, want RBAC's refusal", err)
		if err == nil {
			must(t, testCluster.Client.Delete(ctx, byController))
		}
	}
}

// isLabelPolicyRefusal reports whether err is the refusal of an admission policy that guards
// plane labels: the prerequisites' ownership policy, or (for a plane's own components) the
// plane's node policy, whichever the apiserver evaluated first.
func isLabelPolicyRefusal(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "ValidatingAdmissionPolicy 'control-plane-ownership-labels.nvidia.com'") && strings.Contains(msg, "only cluster administrators") ||
		strings.Contains(msg, "-cdplane-node-labels'") && strings.Contains(msg, "may only change nodes assigned to their plane")
}

// asUser returns a client acting as user name, authenticated and in no other group.
func asUser(t *testing.T, name string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(testCluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: name, Groups: []string{"system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	must(t, err)
	return c
}

// canPatch asks the apiserver whether c's identity may patch resource kind (core group,
// cluster-wide): what RBAC grants, before admission.
func canPatch(t *testing.T, c client.Client, kind string) bool {
	t.Helper()
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "patch", Resource: kind},
	}}
	must(t, c.Create(context.Background(), review))
	return review.Status.Allowed
}

// planeLabel reads obj's plane label on a fresh GET.
func planeLabel(t *testing.T, obj client.Object) string {
	t.Helper()
	cur := obj.DeepCopyObject().(client.Object)
	must(t, testCluster.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), cur))
	return cur.GetLabels()[cdv1beta1.ControlPlaneLabel]
}

func labelPatch(value *string) []byte {
	if value == nil {
		return []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, cdv1beta1.ControlPlaneLabel))
	}
	return []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, cdv1beta1.ControlPlaneLabel, *value))
}

// labelEditorRole lets its holder change namespaces and nodes, labels included, so that only
// admission stands between it and the plane label.
func labelEditorRole(suffix string) client.Object {
	return clusterRole("label-editor-"+suffix, []any{
		map[string]any{"apiGroups": []any{""}, "resources": []any{"namespaces", "nodes"}, "verbs": []any{"get", "list", "patch", "update"}},
	})
}

// domainEditorRole grants what a tenant needs on ComputeDomains.
func domainEditorRole(suffix string) client.Object {
	return clusterRole("computedomain-editor-"+suffix, []any{
		map[string]any{"apiGroups": []any{cdv1beta1.GroupName}, "resources": []any{"computedomains"}, "verbs": []any{"get", "list", "watch", "create", "update", "patch", "delete"}},
	})
}

func clusterRole(name string, rules []any) client.Object {
	r := &unstructured.Unstructured{}
	r.SetUnstructuredContent(map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
		"metadata": map[string]any{"name": name},
		"rules":    rules,
	})
	return r
}

func clusterRoleBinding(name, role, user string) client.Object {
	rb := &unstructured.Unstructured{}
	rb.SetUnstructuredContent(map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
		"metadata": map[string]any{"name": name},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
		"subjects": []any{map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}},
	})
	return rb
}

func forbidden(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: %v, want Forbidden", what, err)
	}
}

func ptr(s string) *string { return &s }

func rolebinding(ns, name, role, user string) client.Object {
	return rolebindingTo(ns, name, "ClusterRole", role, user)
}

func rolebindingTo(ns, name, roleKind, role, user string) client.Object {
	rb := &unstructured.Unstructured{}
	rb.SetUnstructuredContent(map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": roleKind, "name": role},
		"subjects": []any{map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}},
	})
	return rb
}

// checkPriorityLevels: the plane's FlowSchemas put its controller's leader-election lease
// requests in the leader-election priority level and its other requests in workload-high, as
// the apiserver reports on each response (X-Kubernetes-PF-PriorityLevel-UID); another service
// account's requests stay in the default levels.
func checkPriorityLevels(t *testing.T, id string) {
	ctx := context.Background()
	uids := map[string]string{}
	for _, name := range []string{"leader-election", "workload-high"} {
		plc := &flowcontrolv1.PriorityLevelConfiguration{}
		must(t, testCluster.Client.Get(ctx, client.ObjectKey{Name: name}, plc))
		uids[string(plc.UID)] = name
	}
	driverNS := plane.Name(id, plane.DriverNamespaceLegacyName)
	level := func(sa, path string) (string, error) {
		hc, err := rest.HTTPClientFor(serviceAccount(id, sa))
		if err != nil {
			return "", err
		}
		resp, err := hc.Get(testCluster.Config.Host + path)
		if err != nil {
			return "", err
		}
		_ = resp.Body.Close()
		uid := resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID")
		if name, ok := uids[uid]; ok {
			return name, nil
		}
		return "other (" + uid + ")", nil
	}
	lease := "/apis/coordination.k8s.io/v1/namespaces/" + driverNS + "/leases/cdplane-controller"
	domains := "/apis/resource.nvidia.com/v1beta1/computedomains"
	for _, c := range []struct{ sa, path, want string }{
		{"cdplane-controller", lease, "leader-election"},
		{"cdplane-controller", domains, "workload-high"},
		{"cdplane-daemon", lease, ""},
	} {
		// The apiserver applies new FlowSchemas asynchronously.
		testutil.Eventually(t, 30*time.Second, c.sa+" GET "+c.path+" in "+c.want, func() (bool, error) {
			got, err := level(c.sa, c.path)
			if err != nil {
				return false, err
			}
			if c.want == "" {
				return strings.HasPrefix(got, "other"), nil
			}
			return got == c.want, nil
		})
	}
}
