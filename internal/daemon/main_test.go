package daemon

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
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
