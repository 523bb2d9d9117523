package planes

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	charts "cdplane/deployments/helm"
	"cdplane/internal/controller/secretmirror"
	"cdplane/internal/lifecycle"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
)

// applyPlaneRights is installPlaneRights with chart values: it creates or replaces the plane's
// service accounts and the objects of templates as the chart renders them with values, and
// puts back, when the test ends, what was there before (deleting what was not). The legacy
// plane's cluster-wide objects have fixed names, shared with other tests of this binary.
func applyPlaneRights(t *testing.T, id string, values map[string]any, templates ...string) (driverNS string) {
	t.Helper()
	ctx := testContext(t)
	release, ns := lifecycle.PlaneRelease(id)
	vals := map[string]any{"controlPlaneID": id}
	for k, v := range values {
		vals[k] = v
	}
	ms, err := charts.Render(charts.Plane, release, ns, testutil.WithImage(vals))
	if err != nil {
		t.Fatal(err)
	}
	if err := testCluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: plane.Stamp(id, nil)}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	c := testCluster.Client
	for _, m := range ms {
		wanted := m.Object.GetKind() == "ServiceAccount"
		for _, tmpl := range templates {
			wanted = wanted || strings.HasSuffix(m.Template, "/"+tmpl)
		}
		if !wanted {
			continue
		}
		obj := m.Object.DeepCopy()
		before := &unstructured.Unstructured{}
		before.SetGroupVersionKind(obj.GroupVersionKind())
		err := c.Get(ctx, client.ObjectKeyFromObject(obj), before)
		switch {
		case apierrors.IsNotFound(err):
			before = nil
			err = c.Create(ctx, obj)
		case err == nil:
			obj.SetResourceVersion(before.GetResourceVersion())
			err = c.Update(ctx, obj)
		}
		if err != nil {
			t.Fatalf("%s: writing %s %s: %v", m.Template, obj.GetKind(), obj.GetName(), err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if before == nil {
				_ = c.Delete(ctx, obj)
				return
			}
			cur := obj.DeepCopy()
			if err := c.Get(ctx, client.ObjectKeyFromObject(cur), cur); err != nil {
				t.Errorf("restoring %s %s: %v", obj.GetKind(), obj.GetName(), err)
				return
			}
			restore := before.DeepCopy()
			restore.SetResourceVersion(cur.GetResourceVersion())
			if err := c.Update(ctx, restore); err != nil {
				t.Errorf("restoring %s %s: %v", obj.GetKind(), obj.GetName(), err)
			}
		})
	}
	return ns
}

// TestMirrorWritesOnlyItsCopies: with Secret mirroring on, a plane's controller holds Secret
// rights in every namespace it mirrors into, and the legacy plane's controller cluster-wide. A
// leaked token of either may still write only the mirror's copies: Secrets that carry the
// mirror's labels before and after the write, never a bootstrap or service-account token,
// never in the source namespace or a kube-* namespace (kube-system's bootstrap tokens are node
// credentials), and for the legacy plane only in the namespaces its mirror's selector picks. A
// tenant's own Secret is neither overwritten, relabelled into a copy, nor deleted. Deleting a
// copy needs only its labels: a namespace that left the selector is swept.
func TestMirrorWritesOnlyItsCopies(t *testing.T) {
	installPolicies(t) // not parallel: replaces the legacy plane's cluster-wide RBAC and policy for its duration
	ctx := testContext(t)
	const id = "mirror"
	mirrorValues := func(nsSelector string) map[string]any {
		return map[string]any{"secretMirror": map[string]any{"selector": "mirror=yes", "namespaceSelector": nsSelector}}
	}
	planeNS := applyPlaneRights(t, id, mirrorValues(""), "rbac-controller.yaml", "policy-controller.yaml")
	legacyNS := applyPlaneRights(t, "", mirrorValues("mirror-target=yes"), "rbac-controller.yaml", "policy-controller.yaml")

	selected := testCluster.Namespace(t, map[string]string{"mirror-target": "yes"})
	unselected := testCluster.Namespace(t, nil)
	assigned := assignedNamespace(t, id)
	secret := func(ns, name string, labels map[string]string, typ corev1.SecretType) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Type: typ,
			Data: map[string][]byte{"token": []byte("x")}}
	}
	legacyCopy := secretmirror.Marker("", legacyNS)
	planeCopy := secretmirror.Marker(id, planeNS)
	// What is already there, written by an administrator: tenants' own Secrets, and a copy left
	// in a namespace that no longer matches the selector.
	for _, s := range []*corev1.Secret{
		secret(selected, "tenant-own", nil, corev1.SecretTypeOpaque),
		secret(assigned, "tenant-own", nil, corev1.SecretTypeOpaque),
		secret(unselected, "left-behind", legacyCopy, corev1.SecretTypeOpaque),
	} {
		if err := testCluster.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	account := func(ns, name string) client.Client {
		u, err := serviceAccountIdentity(ctx, ns, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		return u.c
	}
	legacyCtl := account(legacyNS, "cdplane-controller")
	planeCtl := account(planeNS, plane.Name(id, "cdplane-controller"))

	create := func(c client.Client, s *corev1.Secret) error { return c.Create(ctx, s, client.DryRunAll) }
	relabel := func(c client.Client, ns, name string, labels map[string]string) error {
		cur := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cur); err != nil {
			return err
		}
		cur.Labels = labels
		cur.Data = map[string][]byte{"token": []byte("attacker's")}
		return c.Update(ctx, cur, client.DryRunAll)
	}
	remove := func(c client.Client, ns, name string) error {
		return c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, client.DryRunAll)
	}
	eventuallyRefused(t, "the legacy controller writing a bootstrap token into kube-system", func() error {
		return create(legacyCtl, secret("kube-system", "bootstrap-token-abcdef", legacyCopy, corev1.SecretTypeBootstrapToken))
	})
	eventuallyRefused(t, "a plane's controller overwriting a tenant's Secret", func() error {
		return relabel(planeCtl, assigned, "tenant-own", planeCopy)
	})
	const onlyCopies, onlySelected = "may only write the Secret mirror's copies", "matching the mirror's namespace selector"
	for what, tc := range map[string]struct {
		attack func() error
		want   string // "" admitted
	}{
		"legacy: a copy where the selector points": {attack: func() error {
			return create(legacyCtl, secret(selected, "copy", legacyCopy, corev1.SecretTypeOpaque))
		}},
		"legacy: a copy outside the selector": {attack: func() error {
			return create(legacyCtl, secret(unselected, "copy", legacyCopy, corev1.SecretTypeOpaque))
		}, want: onlySelected},
		"legacy: an opaque copy in kube-system": {attack: func() error {
			return create(legacyCtl, secret("kube-system", "copy", legacyCopy, corev1.SecretTypeOpaque))
		}, want: "kube-*"},
		"legacy: a Secret without the mirror's labels": {attack: func() error {
			return create(legacyCtl, secret(selected, "plain", nil, corev1.SecretTypeOpaque))
		}, want: onlyCopies},
		"legacy: a bootstrap token as a copy": {attack: func() error {
			return create(legacyCtl, secret(selected, "bootstrap-token-abcdef", legacyCopy, corev1.SecretTypeBootstrapToken))
		}, want: onlyCopies},
		"legacy: a copy in the source namespace": {attack: func() error {
			return create(legacyCtl, secret(legacyNS, "copy", legacyCopy, corev1.SecretTypeOpaque))
		}, want: onlyCopies},
		"legacy: a tenant's Secret turned into a copy": {attack: func() error {
			return relabel(legacyCtl, selected, "tenant-own", legacyCopy)
		}, want: onlyCopies},
		"legacy: a tenant's Secret deleted": {attack: func() error {
			return remove(legacyCtl, selected, "tenant-own")
		}, want: onlyCopies},
		"legacy: a copy left outside the selector, swept": {attack: func() error {
			return remove(legacyCtl, unselected, "left-behind")
		}},
		"plane: a copy in its namespace": {attack: func() error {
			return create(planeCtl, secret(assigned, "copy", planeCopy, corev1.SecretTypeOpaque))
		}},
		"plane: a copy with the legacy plane's labels": {attack: func() error {
			return create(planeCtl, secret(assigned, "copy", legacyCopy, corev1.SecretTypeOpaque))
		}, want: onlyCopies},
		"plane: a tenant's Secret overwritten": {attack: func() error {
			return relabel(planeCtl, assigned, "tenant-own", planeCopy)
		}, want: onlyCopies},
		"plane: a tenant's Secret deleted": {attack: func() error {
			return remove(planeCtl, assigned, "tenant-own")
		}, want: onlyCopies},
	} {
		err := tc.attack()
		checkAdmission(t, what, err, tc.want)
	}
}
