package plane

import (
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	cdv1beta1 "cdplane/api/v1beta1"
)

func TestOwnsAndSelector(t *testing.T) {
	none := map[string]string{"x": "y"}
	a := map[string]string{cdv1beta1.ControlPlaneLabel: "plane-a"}
	b := map[string]string{cdv1beta1.ControlPlaneLabel: "plane-b"}
	cases := map[string]struct {
		id     string
		labels map[string]string
		want   bool
	}{
		"legacy owns unlabelled":          {"", none, true},
		"legacy does not own plane-a's":   {"", a, false},
		"plane-a owns its own":            {"plane-a", a, true},
		"plane-a does not own plane-b's":  {"plane-a", b, false},
		"plane-a does not own unlabelled": {"plane-a", none, false},
	}
	for name, tc := range cases {
		if got := Owns(tc.id, tc.labels); got != tc.want {
			t.Errorf("%s: Owns = %v, want %v", name, got, tc.want)
		}
		if got := Selector(tc.id).Matches(labels.Set(tc.labels)); got != tc.want {
			t.Errorf("%s: Selector matches = %v, want %v", name, got, tc.want)
		}
	}
	if l := Stamp("", nil); l != nil {
		t.Errorf("the legacy plane stamped %v", l)
	}
	if l := Stamp("plane-a", nil); l[cdv1beta1.ControlPlaneLabel] != "plane-a" {
		t.Errorf("Stamp = %v", l)
	}
}
