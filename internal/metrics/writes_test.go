package metrics

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cdv1beta1 "cdplane/api/v1beta1"
	cdapply "cdplane/api/v1beta1/applyconfiguration/api/v1beta1"
	"cdplane/internal/scheme"
)

// writeCounts returns plane id's cdplane_api_writes_total series as "kind verb subresource".
func writeCounts(t *testing.T, id string) map[string]float64 {
	t.Helper()
	got := map[string]float64{}
	for _, mf := range gather(t, APIWritesName) {
		for _, m := range mf.GetMetric() {
			l := labelMap(m)
			if l[LabelControlPlaneID] != id {
				continue
			}
			got[l[LabelKind]+" "+l[LabelVerb]+" "+l[LabelSubresource]] = m.GetCounter().GetValue()
		}
	}
	return got
}

// TestCountWrites: every kind of write through the wrapped client is counted once, by kind, verb
// and subresource, refused ones included; reads are not.
func TestCountWrites(t *testing.T) {
	const id = "writes-test"
	ctx := context.Background()
	base := fake.NewClientBuilder().WithScheme(scheme.New()).WithStatusSubresource(&cdv1beta1.ComputeDomain{}).Build()
	c := CountWrites(base, id)

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Create(ctx, cm))
	must(c.Get(ctx, client.ObjectKeyFromObject(cm), cm))
	must(c.List(ctx, &corev1.ConfigMapList{}))
	cm.Data = map[string]string{"k": "v"}
	must(c.Update(ctx, cm))
	orig := cm.DeepCopy()
	cm.Labels = map[string]string{"l": "v"}
	must(c.Patch(ctx, cm, client.MergeFrom(orig)))
	must(c.Delete(ctx, cm))
	// Refused (already gone): still a write sent.
	if err := c.Delete(ctx, cm); err == nil {
		t.Fatal("deleting a deleted ConfigMap succeeded")
	}
	must(c.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace("ns")))
	// Metadata-only objects carry their kind.
	meta := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	_ = c.Patch(ctx, meta, client.RawPatch("application/merge-patch+json", []byte(`{}`)))

	cd := &cdv1beta1.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Name: "cd", Namespace: "ns"}}
	must(c.Create(ctx, cd))
	cd.Status.Status = cdv1beta1.StatusNotReady
	must(c.Status().Update(ctx, cd))
	orig2 := cd.DeepCopy()
	cd.Status.Status = cdv1beta1.StatusReady
	must(c.Status().Patch(ctx, cd, client.MergeFrom(orig2)))
	// Server-side apply, of the object and of its status (the fake may refuse; counted anyway).
	_ = c.Apply(ctx, cdapply.ComputeDomain("cd", "ns"), client.FieldOwner("test"))
	_ = c.Status().Apply(ctx, cdapply.ComputeDomain("cd", "ns"), client.FieldOwner("test"))
	_ = c.SubResource("scale").Update(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "ns"}})

	want := map[string]float64{
		"ConfigMap create ":           1,
		"ConfigMap update ":           1,
		"ConfigMap patch ":            1,
		"ConfigMap delete ":           2,
		"ConfigMap deletecollection ": 1,
		"Node patch ":                 1,
		"ComputeDomain create ":       1,
		"ComputeDomain update status": 1,
		"ComputeDomain patch status":  1,
		"ComputeDomain apply ":        1,
		"ComputeDomain apply status":  1,
		"Deployment update scale":     1,
	}
	if diff := cmp.Diff(want, writeCounts(t, id)); diff != "" {
		t.Errorf("cdplane_api_writes_total (-want +got):\n%s", diff)
	}
}

// TestPatchVerb: a server-side apply patch counts as apply, others as patch.
func TestPatchVerb(t *testing.T) {
	for name, tc := range map[string]struct {
		patch client.Patch
		want  string
	}{
		"merge":            {client.MergeFrom(&corev1.ConfigMap{}), VerbPatch},
		"strategic merge":  {client.StrategicMergeFrom(&corev1.ConfigMap{}), VerbPatch},
		"raw apply (yaml)": {client.RawPatch("application/apply-patch+yaml", nil), VerbApply},
		"raw apply (cbor)": {client.RawPatch("application/apply-patch+cbor", nil), VerbApply},
	} {
		t.Run(name, func(t *testing.T) {
			if got := patchVerb(tc.patch); got != tc.want {
				t.Errorf("patchVerb = %q, want %q", got, tc.want)
			}
		})
	}
}
