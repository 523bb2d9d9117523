package secretmirror

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestMirrorReturnsEachTargetsFailure: a write that fails in one target does not stop the
// others, and the pass returns it, naming the namespace, so that the source is retried with
// backoff; it is never swallowed into a pass that looks successful.
func TestMirrorReturnsEachTargetsFailure(t *testing.T) {
	src := makeSource("creds", map[string]string{"k": "source"})
	target := map[string]string{pl: "plane-a"}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "creds", nil)
	failIn := func(ns string) interceptor.Funcs {
		return interceptor.Funcs{Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			if obj.GetNamespace() == ns {
				return forbidden
			}
			return nil
		}}
	}
	c, raw, _ := mirrorClient(failIn("team-b"), src, namespace("team-a", target), namespace("team-b", target), namespace("team-c", target))
	r, _ := testMirror(t, planeOpts(), c)

	_, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: k8stypes.NamespacedName{Namespace: srcNS, Name: "creds"}})
	if err == nil || !strings.Contains(err.Error(), "namespace team-b") || !apierrors.IsForbidden(err) {
		t.Fatalf("Reconcile = %v, want the Forbidden of namespace team-b", err)
	}
	for _, ns := range []string{"team-a", "team-c"} {
		if err := raw.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "creds"}, &corev1.Secret{}); err != nil {
			t.Errorf("the copy in %s, after the failure in team-b: %v", ns, err)
		}
	}
}

// TestDeleteRereadsTheCopy: a copy is deleted only when a fresh read, right before the delete,
// shows the plane's marker: whatever an earlier list said, a Secret that is not the plane's
// copy (now) is never deleted, and the refusal is counted. The sweep of a namespace that left
// the plane lists the copies first; here the list is stale and names a Secret a user has since
// made their own.
func TestDeleteRereadsTheCopy(t *testing.T) {
	mine := secret("left", "mine", Marker("plane-a", srcNS), "copy")
	taken := secret("left", "taken", map[string]string{"owner": "user"}, "theirs")
	// The stale list: both Secrets as copies, as a list made before the user took one over.
	staleList := func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		l, ok := list.(*metav1.PartialObjectMetadataList)
		if !ok || l.GroupVersionKind().Kind != "SecretList" {
			return c.List(ctx, list, opts...)
		}
		for _, s := range []*corev1.Secret{mine, taken} {
			m := metav1.PartialObjectMetadata{ObjectMeta: *s.ObjectMeta.DeepCopy()}
			m.Labels = Marker("plane-a", srcNS)
			l.Items = append(l.Items, m)
		}
		return nil
	}
	c, raw, writes := mirrorClient(interceptor.Funcs{List: staleList}, namespace("left", nil), mine, taken)
	r, _ := testMirror(t, planeOpts(), c)
	mirrorBefore, _ := foreignCount()

	if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: k8stypes.NamespacedName{Namespace: "left"}}); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	if diff := cmp.Diff([]secretWrite{{"delete", "left", "mine"}}, writes.list(), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if err := raw.Get(t.Context(), client.ObjectKeyFromObject(taken), &corev1.Secret{}); err != nil {
		t.Errorf("the Secret the user took over: %v", err)
	}
	if mirrorAfter, _ := foreignCount(); mirrorAfter-mirrorBefore != 1 {
		t.Errorf("refusals counted +%v, want +1", mirrorAfter-mirrorBefore)
	}
}
