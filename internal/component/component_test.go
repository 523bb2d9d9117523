package component

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"cdplane/internal/version"
)

type testOptions struct{ name string }

func (o *testOptions) AddFlags(fs *pflag.FlagSet) { fs.StringVar(&o.name, "name", "", "a name") }

func (o *testOptions) Validate() error {
	if o.name == "" {
		return errors.New("--name is required")
	}
	return nil
}

func TestParse(t *testing.T) {
	versionLine := "cdplane-test " + version.Version + " (commit "
	cases := map[string]struct {
		args    []string
		wantErr string // "" for none
		wantOut string // a prefix of stdout; "" for no output
	}{
		"valid":                            {args: []string{"--name=x"}},
		"invalid":                          {wantErr: "--name is required"},
		"unknown flag":                     {args: []string{"--nope"}, wantErr: "unknown flag: --nope"},
		"version without required flags":   {args: []string{"--version"}, wantErr: ErrVersionPrinted.Error(), wantOut: versionLine},
		"version among the other flags":    {args: []string{"--name=x", "--version"}, wantErr: ErrVersionPrinted.Error(), wantOut: versionLine},
		"version with an invalid flag too": {args: []string{"--version", "--nope"}, wantErr: "unknown flag: --nope"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			inv := Invocation{Stdout: &stdout, Stderr: &stderr}
			err := inv.Parse("cdplane-test", &testOptions{}, tc.args)
			if gotErr := errString(err); !strings.Contains(gotErr, tc.wantErr) || (tc.wantErr == "") != (err == nil) {
				t.Errorf("Parse(%q) = %v, want an error with %q", tc.args, err, tc.wantErr)
			}
			if tc.wantErr == ErrVersionPrinted.Error() && !errors.Is(err, ErrVersionPrinted) {
				t.Errorf("Parse(%q) = %v, want ErrVersionPrinted", tc.args, err)
			}
			if got := stdout.String(); !strings.HasPrefix(got, tc.wantOut) || (tc.wantOut == "") != (got == "") {
				t.Errorf("stdout %q, want it to start with %q", got, tc.wantOut)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

type effOpts struct {
	Name  string
	Count int
}

// AddFlags registers with constant defaults, as flags whose default comes from elsewhere do:
// registering them again would reset what was parsed.
func (o *effOpts) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Name, "name", "default", "a name")
	fs.IntVar(&o.Count, "count", 1, "a count")
}

func (o *effOpts) Validate() error { return nil }

// EffectiveFlags returns what Parse saw, once, and never changes the options.
func TestEffectiveFlags(t *testing.T) {
	o := &effOpts{}
	inv := Invocation{Stderr: io.Discard, Stdout: io.Discard}
	if err := inv.Parse("t", o, []string{"--count=7", "--name=x"}); err != nil {
		t.Fatal(err)
	}
	got := EffectiveFlags(o)
	if got["name"] != "x" || got["count"] != "7" || got["version"] != "false" {
		t.Errorf("EffectiveFlags = %v, want name=x count=7 version=false", got)
	}
	if o.Name != "x" || o.Count != 7 {
		t.Errorf("options changed by EffectiveFlags: %+v", *o)
	}
	if again := EffectiveFlags(o); again != nil {
		t.Errorf("EffectiveFlags a second time = %v, want nil (taken once)", again)
	}
	if none := EffectiveFlags(&effOpts{}); none != nil {
		t.Errorf("EffectiveFlags of options never parsed = %v, want nil", none)
	}
}
