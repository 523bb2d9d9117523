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
	// The label present with an empty value: someone set it (a label is not a valid plane id
	// when empty, but the apiserver admits the value). It is not "without the label": the
	// legacy plane owns only objects that carry no plane label at all, as its cache selector
	// (DoesNotExist) selects them, so that an object cannot be both unselected by the cache and
	// owned by the fresh-read check, or owned by the legacy plane and by no plane at once.
	empty := map[string]string{cdv1beta1.ControlPlaneLabel: ""}
	cases := map[string]struct {
		id     string
		labels map[string]string
		want   bool
	}{
		"legacy owns unlabelled":                    {"", none, true},
		"legacy does not own plane-a's":             {"", a, false},
		"plane-a owns its own":                      {"plane-a", a, true},
		"plane-a does not own plane-b's":            {"plane-a", b, false},
		"plane-a does not own unlabelled":           {"plane-a", none, false},
		"legacy does not own an empty plane label":  {"", empty, false},
		"plane-a does not own an empty plane label": {"plane-a", empty, false},
		"legacy owns a nil label map":               {"", nil, true},
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
