package daemon

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"cdplane/internal/component"
	"cdplane/internal/daemonenv"
	"cdplane/internal/plane"
)

func TestDriverFilesFromEnv(t *testing.T) {
	env := map[string]string{"IMEX_BINARY": "/d/imex", "IMEX_CTL_BINARY": "/d/ctl", "NVML_LIBRARY": "/d/nvml.so"}
	type files struct{ IMEX, Ctl, NVML string }
	cases := map[string]struct {
		args []string
		env  map[string]string
		want files
	}{
		"defaults":     {want: files{"nvidia-imex", "nvidia-imex-ctl", ""}},
		"from the env": {env: env, want: files{"/d/imex", "/d/ctl", "/d/nvml.so"}},
		"flags win":    {args: []string{"--imex-binary=/f/imex", "--nvml-library=/f/nvml"}, env: env, want: files{"/f/imex", "/d/ctl", "/f/nvml"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			o.driverFilesFromEnv(fs, func(k string) string { return tc.env[k] })
			if diff := cmp.Diff(tc.want, files{o.IMEXBinary, o.IMEXCtlBinary, o.NVMLLibrary}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// The metrics flags are checked before anything else happens; the plane comes from the flag or
// the environment. Valid ones get as far as reading the daemon's identity.
func TestRunValidatesMetricsFlags(t *testing.T) {
	cases := map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"IMEX's command port":         {args: []string{"--metrics-bind-address=127.0.0.1:50005"}, want: "is IMEX's"},
		"no port":                     {args: []string{"--metrics-bind-address=127.0.0.1"}, want: "want host:port or 0"},
		"a bad plane id":              {args: []string{"--control-plane-id=Plane-A"}, want: "Plane-A"},
		"a bad plane id from the env": {env: map[string]string{plane.EnvVar: "Plane-A"}, want: "Plane-A"},
		"valid": {
			args: []string{"--metrics-bind-address=127.0.0.1:8082", "--control-plane-id=plane-a"},
			want: daemonenv.NodeName + " is not set",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			inv := component.Invocation{
				Args: append([]string{CommandRun}, tc.args...), Stdout: io.Discard, Stderr: io.Discard,
				LookupEnv: func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok },
			}
			err := Run(context.Background(), inv, Host{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
