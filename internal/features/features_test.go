package features

import (
	"strings"
	"testing"

	"k8s.io/component-base/featuregate"
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

// NewGatesForTest sets a gate for one instance's gate set and leaves every other set alone.
func TestNewGatesForTest(t *testing.T) {
	flipped := NewGatesForTest(t, map[featuregate.Feature]bool{ComputeDomainCliques: false, IMEXDaemonsWithDNSNames: true})
	if flipped.Enabled(ComputeDomainCliques) {
		t.Error("gate not set in the returned set")
	}
	if !NewGates().Enabled(ComputeDomainCliques) {
		t.Error("a fresh gate set saw another set's flip")
	}
}

// hostManaged needs its gate; anything but the two modes is refused, naming the value.
func TestParseIMEXMode(t *testing.T) {
	on := NewGatesForTest(t, map[featuregate.Feature]bool{HostManagedIMEXDaemon: true})
	cases := map[string]struct {
		value   string
		gates   featuregate.FeatureGate
		want    IMEXMode
		wantErr string
	}{
		"default":             {value: "", gates: NewGates(), want: IMEXDriverManaged},
		"driver managed":      {value: "driverManaged", gates: NewGates(), want: IMEXDriverManaged},
		"host managed, gated": {value: "hostManaged", gates: on, want: IMEXHostManaged},
		"host managed, no gate": {value: "hostManaged", gates: NewGates(),
			wantErr: "--imex-mode=hostManaged requires the feature gate HostManagedIMEXDaemon=true"},
		"unknown": {value: "HostManaged", gates: on, wantErr: `--imex-mode "HostManaged": want driverManaged or hostManaged`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseIMEXMode(tc.value, tc.gates)
			switch {
			case tc.wantErr != "":
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatalf("unexpected error: %v", err)
			case got != tc.want:
				t.Fatalf("mode = %q, want %q", got, tc.want)
			}
		})
	}
}
