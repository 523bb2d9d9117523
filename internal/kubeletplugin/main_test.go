package kubeletplugin

import (
	"strings"
	"testing"

	"cdplane/internal/component"
)

func TestCommandOptionsDriverRoot(t *testing.T) {
	cases := map[string]struct {
		env               map[string]string
		args              []string
		wantHost, wantCtr string
		wantErr           string
	}{
		"default":        {wantHost: "/"},
		"from the env":   {env: map[string]string{"NVIDIA_DRIVER_ROOT": "/run/nvidia/driver", "CONTAINER_DRIVER_ROOT": "/driver-root"}, wantHost: "/run/nvidia/driver", wantCtr: "/driver-root"},
		"flags win":      {env: map[string]string{"NVIDIA_DRIVER_ROOT": "/x"}, args: []string{"--nvidia-driver-root=/run/nvidia/driver", "--container-driver-root=/driver-root"}, wantHost: "/run/nvidia/driver", wantCtr: "/driver-root"},
		"relative root":  {args: []string{"--nvidia-driver-root=run/nvidia/driver"}, wantErr: `--nvidia-driver-root "run/nvidia/driver": want an absolute path`},
		"relative mount": {args: []string{"--container-driver-root=driver-root"}, wantErr: `--container-driver-root "driver-root": want an absolute path`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			env := map[string]string{"NODE_NAME": "n1", "POD_NAMESPACE": "ns"}
			for k, v := range tc.env {
				env[k] = v
			}
			inv := component.Invocation{Args: tc.args, LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
			o := NewCommandOptions(inv)
			fs := inv.NewFlagSet("cdplane-kubelet-plugin")
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := o.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Validate: %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.NvidiaDriverRoot != tc.wantHost || o.ContainerDriverRoot != tc.wantCtr {
				t.Errorf("driver root %q read at %q, want %q at %q", o.NvidiaDriverRoot, o.ContainerDriverRoot, tc.wantHost, tc.wantCtr)
			}
		})
	}
}
