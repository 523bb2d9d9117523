package lifecycle

import (
	"testing"

	"cdplane/internal/refusal"
)

func TestPlaneSkew(t *testing.T) {
	for _, tc := range []struct {
		prerequisites, plane string
		refused              bool
	}{
		{"0.1.0", "0.2.0-dev", true},
		{"0.1.0", "0.2.0", true},
		{"0.1.5", "0.2.0", true},
		{"0.9.0", "1.0.0", true},
		{"0.2.0-dev", "0.2.0-dev", false},
		{"0.2.0-dev", "0.2.0", false},
		{"0.2.0", "0.2.1", false},
		{"0.2.0", "0.1.0", false}, // a plane gone back to the previous release
		{"1.0.0", "0.2.0", false},
	} {
		err := planeSkew(tc.prerequisites, tc.plane)
		if refused := refusal.Is(err); refused != tc.refused || (err != nil && !refused) {
			t.Errorf("prerequisites %s, plane %s: %v, want refused=%v", tc.prerequisites, tc.plane, err, tc.refused)
		}
	}
	if err := planeSkew("not-a-version", "0.2.0"); err == nil || refusal.Is(err) {
		t.Errorf("an unreadable prerequisites version: %v, want an error that is not a refusal", err)
	}
}
