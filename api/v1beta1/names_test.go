package v1beta1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestValidateCliqueID(t *testing.T) {
	cases := map[string]bool{
		"":                                       true, // no fabric
		"7f9c1b2e-0d7a-4c1f-9a55-3b6f2f0e8c11.1": true,
		"7f9c1b2e-0d7a-4c1f-9a55-3b6f2f0e8c11.42": true,
		"a":                     true,
		"Bad_Clique.1":          false, // a label value, not a DNS subdomain
		"UPPER.1":               false,
		"uuid..1":               false,
		"-lead.1":               false,
		"trail.":                false,
		"with space":            false,
		strings.Repeat("a", 63): true,
		strings.Repeat("a", 64): false, // longer than a label value
	}
	for id, want := range cases {
		if err := ValidateCliqueID(id); (err == nil) != want {
			t.Errorf("ValidateCliqueID(%q) = %v, want valid=%v", id, err, want)
		}
	}
}

// FuzzValidateCliqueID: every id it accepts names a clique and can label one.
func FuzzValidateCliqueID(f *testing.F) {
	for _, seed := range []string{"", "7f9c1b2e-0d7a-4c1f-9a55-3b6f2f0e8c11.1", "Bad_Clique.1", "uuid..1", "a.", strings.Repeat("a", 64)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if ValidateCliqueID(id) != nil || id == "" {
			return
		}
		name := CliqueName("0b7e3f4a-1c2d-4e5f-8a9b-0c1d2e3f4a5b", id)
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("accepted %q, but clique name %q is invalid: %v", id, name, errs)
		}
		if errs := validation.IsValidLabelValue(id); len(errs) > 0 {
			t.Errorf("accepted %q, but it cannot label a clique: %v", id, errs)
		}
	})
}
