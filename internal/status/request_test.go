package status

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestValidateRequest(t *testing.T) {
	cases := map[string]struct {
		namespace string
		args      []string
		output    string
		wantErr   string
	}{
		"planes":                  {output: "text"},
		"planes as JSON":          {output: "json"},
		"a domain":                {namespace: "team-a", args: []string{"train.v2"}, output: "text"},
		"an unknown format":       {output: "yaml", wantErr: `--output "yaml": want text or json`},
		"a name without -n":       {args: []string{"train"}, output: "text", wantErr: `ComputeDomain "train": give its namespace too (cdplane status -n NAMESPACE train)`},
		"-n without a name":       {namespace: "team-a", output: "text", wantErr: "-n team-a: give the ComputeDomain's name too"},
		"two names":               {namespace: "team-a", args: []string{"a", "b"}, output: "text", wantErr: "want at most one ComputeDomain name, got 2 arguments"},
		"an invalid namespace":    {namespace: "Team_A", args: []string{"train"}, output: "text", wantErr: `invalid namespace name "Team_A"`},
		"an invalid name":         {namespace: "team-a", args: []string{"../x"}, output: "text", wantErr: `invalid ComputeDomain name "../x"`},
		"every problem is listed": {namespace: "team-a", args: []string{"X"}, output: "yml", wantErr: `--output "yml": want text or json` + "\n" + `invalid ComputeDomain name "X"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := ValidateRequest(tc.namespace, tc.args, tc.output)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

// FuzzValidateRequest: a namespace and a name given on the command line are accepted only when
// they are a valid namespace name and object name.
func FuzzValidateRequest(f *testing.F) {
	for _, s := range [][2]string{{"team-a", "train"}, {"", "x"}, {"a", ""}, {"Team", "x"}, {"a", "../b"}, {"a.b", "c"}, {"a", "x\x00"}, {strings.Repeat("a", 64), "b"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, ns, name string) {
		if ValidateRequest(ns, []string{name}, OutputText) != nil {
			return
		}
		if len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
			t.Errorf("accepted namespace %q, name %q", ns, name)
		}
	})
}
