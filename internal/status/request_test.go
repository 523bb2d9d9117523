package status

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestValidateRequest(t *testing.T) {
	cases := map[string]struct {
		namespace string
		all       bool
		args      []string
		wantErr   string
	}{
		"planes":                       {},
		"a namespace's domains":        {namespace: "team-a"},
		"every namespace's domains":    {all: true},
		"a domain":                     {namespace: "team-a", args: []string{"train.v2"}},
		"a domain in the context's ns": {args: []string{"train"}},
		"two names":                    {namespace: "team-a", args: []string{"a", "b"}, wantErr: "want at most one ComputeDomain name, got 2 arguments"},
		"a name with -A":               {all: true, args: []string{"train"}, wantErr: `ComputeDomain "train": -A lists every namespace's domains`},
		"-n with -A":                   {namespace: "team-a", all: true, wantErr: "-n team-a and -A: give one namespace or every namespace, not both"},
		"an invalid namespace":         {namespace: "Team_A", args: []string{"train"}, wantErr: `invalid namespace name "Team_A"`},
		"an invalid namespace alone":   {namespace: "Team_A", wantErr: `invalid namespace name "Team_A"`},
		"an invalid name":              {namespace: "team-a", args: []string{"../x"}, wantErr: `invalid ComputeDomain name "../x"`},
		"every problem is listed":      {namespace: "Team", args: []string{"X"}, wantErr: `invalid ComputeDomain name "X"` + ": a lowercase RFC 1123 subdomain"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := ValidateRequest(tc.namespace, tc.all, tc.args)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
	if err := ValidateRequest("Team", false, []string{"X"}); err == nil || !strings.Contains(err.Error(), `invalid namespace name "Team"`) {
		t.Errorf("an invalid name and namespace: %v, want both named", err)
	}
}

// FuzzValidateRequest: a namespace and a name given on the command line are accepted only when
// they are a valid namespace name and object name.
func FuzzValidateRequest(f *testing.F) {
	for _, s := range [][2]string{{"team-a", "train"}, {"", "x"}, {"a", ""}, {"Team", "x"}, {"a", "../b"}, {"a.b", "c"}, {"a", "x\x00"}, {strings.Repeat("a", 64), "b"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, ns, name string) {
		if ValidateRequest(ns, false, []string{name}) != nil {
			return
		}
		if (ns != "" && len(validation.IsDNS1123Label(ns)) > 0) || len(validation.IsDNS1123Subdomain(name)) > 0 {
			t.Errorf("accepted namespace %q, name %q", ns, name)
		}
	})
}
