package plane

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func TestValidateID(t *testing.T) {
	cases := map[string]struct {
		id      string
		wantErr string
	}{
		"empty is the legacy plane": {id: ""},
		"plain":                     {id: "plane-a"},
		"digits":                    {id: "0a9"},
		"20 characters":             {id: strings.Repeat("a", 20)},
		"upper case":                {id: "Plane-A", wantErr: "must be lowercase"},
		"underscore":                {id: "plane_a", wantErr: "must be a DNS-1123 label"},
		"leading dash":              {id: "-plane", wantErr: "must be a DNS-1123 label"},
		"trailing dash":             {id: "plane-", wantErr: "must be a DNS-1123 label"},
		"21 characters":             {id: strings.Repeat("a", 21), wantErr: "must be at most 20 characters, has 21"},
		"reserved":                  {id: "default", wantErr: `"default" is reserved`},
		"dot":                       {id: "plane.a", wantErr: "must be a DNS-1123 label"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := ValidateID(tc.id)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateID(%q) = %v, want nil", tc.id, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), tc.id) {
				t.Fatalf("ValidateID(%q) = %v, want an error naming the id and containing %q", tc.id, err, tc.wantErr)
			}
		})
	}
}

func TestName(t *testing.T) {
	legacy63 := strings.Repeat("x", 63-len("plane-a-"))
	cases := map[string]struct {
		id, legacy string
		want       string
	}{
		"legacy plane keeps the name": {id: "", legacy: "cdplane-controller", want: "cdplane-controller"},
		"prefixed":                    {id: "plane-a", legacy: "cdplane-controller", want: "plane-a-cdplane-controller"},
		"exactly 63 is kept":          {id: "plane-a", legacy: legacy63, want: "plane-a-" + legacy63},
		"64 is hashed": {
			id: "plane-a", legacy: legacy63 + "y",
			want: ("plane-a-" + legacy63 + "y")[:54] + "-" + hash8("plane-a-"+legacy63+"y"),
		},
		"trailing dash trimmed before the hash": {
			// The 54th character is '-'.
			id: "plane-a", legacy: strings.Repeat("b", 45) + "-" + strings.Repeat("c", 20),
			want: "plane-a-" + strings.Repeat("b", 45) + "-" + hash8("plane-a-"+strings.Repeat("b", 45)+"-"+strings.Repeat("c", 20)),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Name(tc.id, tc.legacy)
			if got != tc.want {
				t.Errorf("Name(%q, %q) = %q, want %q", tc.id, tc.legacy, got, tc.want)
			}
			if len(got) > 63 {
				t.Errorf("Name(%q, %q) has %d characters", tc.id, tc.legacy, len(got))
			}
		})
	}
	// Stable across releases: pinned to the SHA-256 computed outside Go.
	if got, want := Name("plane-a", strings.Repeat("n", 60)), "plane-a-"+strings.Repeat("n", 46)+"-d4b600fd"; got != want {
		t.Errorf("hashed name %q, want %q", got, want)
	}
}

func TestIsCanonical(t *testing.T) {
	if !IsCanonical("alpha", "cdplane-controller", "alpha-cdplane-controller") {
		t.Error("the exact canonical name is not recognised")
	}
	if IsCanonical("alpha", "cdplane-controller", "alpha-beta-cdplane-controller") {
		t.Error("a name of plane alpha-beta was taken for plane alpha's")
	}
	if IsCanonical("alpha", "x", "alpha-x-extra") {
		t.Error("a prefix match was accepted")
	}
}

func hash8(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:8]
}
