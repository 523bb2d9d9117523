package cleanup

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/plane"
	"cdplane/internal/scheme"
)

const (
	liveUID   = "11111111-1111-4111-8111-111111111111"
	driverNS  = "driver"
	managedBy = "app.kubernetes.io/managed-by"
)

func namespace(name string, planeID *string) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if planeID != nil {
		ns.Labels = map[string]string{cdv1beta1.ControlPlaneLabel: *planeID}
	}
	return ns
}

// template is a claim template labelled as plane id's controller labels what it creates for
// domain uid.
func template(ns, name, id, uid string) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: name,
		Labels: plane.Stamp(id, map[string]string{cdv1beta1.ComputeDomainLabel: uid, managedBy: "cdplane"}),
	}}
}

func node(name, id, uid string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: plane.Stamp(id, map[string]string{cdv1beta1.ComputeDomainLabel: uid})}}
}

func notManaged(rct *resourcev1.ResourceClaimTemplate) *resourcev1.ResourceClaimTemplate {
	rct.Labels[managedBy] = "someone"
	return rct
}

func ptr(s string) *string { return &s }

// TestRunOnce: what one pass of plane "a" (or the legacy plane) removes, which requests it
// sends, and what it returns, with the apiserver forbidding writes in namespace "locked" and
// reads of namespace "unreadable".
func TestRunOnce(t *testing.T) {
	const orphan = "22222222-2222-4222-8222-222222222222"
	objects := func(id string) []client.Object {
		other := "b"
		if id == "b" {
			other = "a"
		}
		return []client.Object{
			&cdv1beta1.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Namespace: "owned", Name: "live", UID: liveUID}},
			namespace(driverNS, ptr(id)),
			namespace("owned", map[bool]*string{true: nil, false: ptr(id)}[id == ""]),
			namespace("foreign", ptr(other)),
			namespace("locked", map[bool]*string{true: nil, false: ptr(id)}[id == ""]),
			namespace("unreadable", map[bool]*string{true: nil, false: ptr(id)}[id == ""]),
			template("owned", "live", id, liveUID),
			template("owned", "orphan", id, orphan),
			template(driverNS, "orphan", id, orphan),
			template("foreign", "look-alike", id, orphan),
			template("locked", "orphan", id, orphan),
			template("unreadable", "orphan", id, orphan),
			notManaged(template("owned", "not-managed", id, orphan)),
			template("owned", "other-plane", other, orphan),
			node("stale", id, orphan),
			node("live", id, liveUID),
			node("other-plane", other, orphan),
		}
	}
	for name, id := range map[string]string{"plane a": "a", "legacy plane": ""} {
		t.Run(name, func(t *testing.T) {
			objs := objects(id)
			var sent []string
			c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if key.Name == "unreadable" && key.Namespace == "" {
						return apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, key.Name, errors.New("no"))
					}
					return c.Get(ctx, key, obj, opts...)
				},
				Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
					sent = append(sent, "delete "+obj.GetNamespace()+"/"+obj.GetName())
					if obj.GetNamespace() == "locked" {
						return apierrors.NewForbidden(schema.GroupResource{Resource: "resourceclaimtemplates"}, obj.GetName(), errors.New("no"))
					}
					return c.Delete(ctx, obj, opts...)
				},
				Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					sent = append(sent, "patch node "+obj.GetName())
					return c.Patch(ctx, obj, patch, opts...)
				},
			}).Build()
			cl := &Cleaner{Client: c, APIReader: c, DriverNamespace: driverNS, ControlPlaneID: id}

			removed, err := cl.RunOnce(context.Background())

			wantSent := []string{"delete driver/orphan", "delete locked/orphan", "delete owned/orphan", "patch node stale"}
			if diff := cmp.Diff(wantSent, sent); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
			if removed != 3 {
				t.Errorf("removed %d, want 3", removed)
			}
			if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "locked/orphan") || !strings.Contains(err.Error(), "namespace unreadable") {
				t.Errorf("pass error %v, want the forbidden delete of locked/orphan and the unreadable namespace, joined", err)
			}
			if err != nil && strings.Contains(err.Error(), "foreign") {
				t.Errorf("pass error %v names the foreign look-alike", err)
			}
			n := &corev1.Node{}
			if err := c.Get(context.Background(), client.ObjectKey{Name: "stale"}, n); err != nil || n.Labels[cdv1beta1.ComputeDomainLabel] != "" {
				t.Errorf("stale node: labels %v (err=%v), want the domain label gone", n.Labels, err)
			}
		})
	}
}
