package domainlabel

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	cdv1beta1 "cdplane/api/v1beta1"
)

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": Auto, "auto": Auto, "true": Always, "false": Never} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"yes", "Auto", "1"} {
		if _, err := ParseMode(in); err == nil || !strings.Contains(err.Error(), "--label-domains") || !strings.Contains(err.Error(), in) {
			t.Errorf("ParseMode(%q): %v, want an error naming the flag and the value", in, err)
		}
	}
}

// The legacy plane never labels, and a forced mode needs no apiserver (a nil config would fail).
func TestEnabledWithoutDiscovery(t *testing.T) {
	for _, tc := range []struct {
		mode Mode
		id   string
		want bool
	}{{Auto, "", false}, {Always, "", false}, {Never, "p", false}, {Always, "p", true}} {
		if got, _, err := Enabled(context.Background(), nil, tc.mode, tc.id); err != nil || got != tc.want {
			t.Errorf("Enabled(%q, %q) = %v, %v; want %v", tc.mode, tc.id, got, err, tc.want)
		}
	}
}

func TestSelectorSelectsOnlyUnlabelled(t *testing.T) {
	sel := Selector()
	if !sel.Matches(labels.Set{"other": "x"}) || sel.Matches(labels.Set{cdv1beta1.ControlPlaneLabel: "p"}) || sel.Matches(labels.Set{cdv1beta1.ControlPlaneLabel: ""}) {
		t.Errorf("selector %s: want it to match exactly the objects without the plane label", sel)
	}
}
