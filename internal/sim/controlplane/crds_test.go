package controlplane

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	cdv1beta1 "cdplane/api/v1beta1"
)

func TestCRDs(t *testing.T) {
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, crd := range crds {
		names = append(names, crd.Name)
		if crd.Spec.Group != cdv1beta1.GroupVersion.Group {
			t.Errorf("CRD %s in group %q", crd.Name, crd.Spec.Group)
		}
	}
	slices.Sort(names)
	want := []string{"computedomaincliques.resource.nvidia.com", "computedomains.resource.nvidia.com"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("CRDs (-want +got):\n%s", diff)
	}
}
