package features

import (
	"strings"
	"testing"
)

func TestParseAndValidate(t *testing.T) {
	cases := map[string]struct {
		flag    string
		wantErr string
	}{
		"defaults":    {flag: ""},
		"cliques off": {flag: "ComputeDomainCliques=false"},
		"cliques without DNS names": {
			flag:    "IMEXDaemonsWithDNSNames=false",
			wantErr: "ComputeDomainCliques=true requires IMEXDaemonsWithDNSNames=true",
		},
		"both off is valid": {flag: "ComputeDomainCliques=false,IMEXDaemonsWithDNSNames=false"},
		"malformed":         {flag: "ComputeDomainCliques", wantErr: "missing bool value for ComputeDomainCliques"},
		"unknown gate":      {flag: "NoSuchGate=true", wantErr: "unrecognized feature gate: NoSuchGate"},
		"bad value":         {flag: "ComputeDomainCliques=maybe", wantErr: "invalid value of ComputeDomainCliques=maybe"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewGates()
			err := g.Set(tc.flag)
			if err == nil {
				err = Validate(g)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestSetForTest(t *testing.T) {
	before := Enabled(ComputeDomainCliques)
	t.Run("flip", func(t *testing.T) {
		SetForTest(t, ComputeDomainCliques, !before)
		if Enabled(ComputeDomainCliques) == before {
			t.Fatal("gate not flipped")
		}
	})
	if Enabled(ComputeDomainCliques) != before {
		t.Fatal("gate not restored after the test")
	}
}
