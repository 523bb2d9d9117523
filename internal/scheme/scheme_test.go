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
