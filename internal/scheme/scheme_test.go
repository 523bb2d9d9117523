package scheme

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	cdv1beta1 "cdplane/api/v1beta1"
)

func TestSharedIsOneSchemeWithBothAPIs(t *testing.T) {
	s := Shared()
	if s != Shared() {
		t.Fatal("Shared built a second scheme")
	}
	if s == New() {
		t.Fatal("New returned the shared scheme")
	}
	for _, gvk := range []string{"ComputeDomain", "ComputeDomainClique"} {
		if !s.Recognizes(cdv1beta1.SchemeGroupVersion.WithKind(gvk)) {
			t.Errorf("the shared scheme does not know %s", gvk)
		}
	}
	if !s.Recognizes(corev1.SchemeGroupVersion.WithKind("Pod")) {
		t.Error("the shared scheme does not know Pod")
	}
}

func TestMetaAndMetaList(t *testing.T) {
	node := corev1.SchemeGroupVersion.WithKind("Node")
	if m := Meta(node); m.GroupVersionKind() != node || m.Name != "" {
		t.Errorf("Meta: %+v", m)
	}
	list := corev1.SchemeGroupVersion.WithKind("NodeList")
	if l := MetaList(list); l.GroupVersionKind() != list || len(l.Items) != 0 {
		t.Errorf("MetaList: %+v", l)
	}
}
