package computedomain

import (
	"context"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/scheme"
	"cdplane/internal/testutil"
)

// apiWrite is one write sent through a recording client: its verb ("patch", "apply/status",
// ...) and the kind and name of the object written.
type apiWrite struct{ Verb, Kind, Namespace, Name string }

// writeLog records the writes sent through a client made by recordingClient.
type writeLog struct {
	mu     sync.Mutex
	writes []apiWrite
}

func (l *writeLog) add(verb, kind, ns, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes = append(l.writes, apiWrite{verb, kind, ns, name})
}

func (l *writeLog) addObj(c client.Client, verb string, obj client.Object) {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	if gvk, err := c.GroupVersionKindFor(obj); err == nil {
		kind = gvk.Kind
	}
	l.add(verb, kind, obj.GetNamespace(), obj.GetName())
}

func (l *writeLog) addApply(verb string, obj runtime.ApplyConfiguration) {
	kind, ns, name := "", "", ""
	if o, ok := obj.(interface {
		GetKind() *string
		GetNamespace() *string
		GetName() *string
	}); ok {
		kind, ns, name = deref(o.GetKind()), deref(o.GetNamespace()), deref(o.GetName())
	}
	l.add(verb, kind, ns, name)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// reset forgets the writes recorded so far.
func (l *writeLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes = nil
}

// of returns the writes recorded to objects of kind.
func (l *writeLog) of(kind string) []apiWrite {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []apiWrite
	for _, w := range l.writes {
		if w.Kind == kind {
			out = append(out, w)
		}
	}
	return slices.Clip(out)
}

// recordingClient is a fake client holding objs, with the status subresource of domains and
// cliques, that records every write sent through it (objects and subresources, any verb) and
// passes it on.
func recordingClient(objs ...client.Object) (client.WithWatch, *writeLog) {
	l := &writeLog{}
	raw := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).
		WithStatusSubresource(&cdv1beta1.ComputeDomain{}, &cdv1beta1.ComputeDomainClique{}).Build()
	return interceptor.NewClient(raw, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			l.addObj(c, "create", obj)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			l.addObj(c, "update", obj)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			l.addObj(c, "patch", obj)
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			l.addObj(c, "delete", obj)
			return c.Delete(ctx, obj, opts...)
		},
		DeleteAllOf: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			l.addObj(c, "deletecollection", obj)
			return c.DeleteAllOf(ctx, obj, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			l.addApply("apply", obj)
			return c.Apply(ctx, obj, opts...)
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			l.addObj(c, "create/"+sub, obj)
			return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			l.addObj(c, "update/"+sub, obj)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			l.addObj(c, "patch/"+sub, obj)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			l.addApply("apply/"+sub, obj)
			return c.SubResource(sub).Apply(ctx, obj, opts...)
		},
	}), l
}

// userNS is the namespace of the domains of the reconciler tests.
const userNS = "user"

// unitDomain is a domain of userNS as a plane (planeID; "" for the legacy plane) stamps it,
// and, when taken, as its controller left it after taking it: finalizer and membership
// annotation (cliques).
func unitDomain(planeID string, taken bool) *cdv1beta1.ComputeDomain {
	w := testutil.MakeComputeDomain("cd").Namespace(userNS).UID(testUID).NumNodes(2)
	if planeID != "" {
		w.Label(cdv1beta1.ControlPlaneLabel, planeID)
	}
	cd := w.Obj()
	if taken {
		cd.Finalizers = []string{cdv1beta1.Finalizer}
		cd.Annotations = map[string]string{cdv1beta1.MembershipAnnotation: cdv1beta1.MembershipInCliques}
	}
	return cd
}

// userNamespace is userNS, assigned to planeID ("" : unassigned).
func userNamespace(planeID string) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: userNS}}
	if planeID != "" {
		ns.Labels = map[string]string{cdv1beta1.ControlPlaneLabel: planeID}
	}
	return ns
}

// pass runs one reconcile of the test domain.
func pass(t *testing.T, r *Reconciler) {
	t.Helper()
	if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: userNS, Name: "cd"}}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
}
