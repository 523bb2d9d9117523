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

func TestCommandOptionsEndpoints(t *testing.T) {
	cases := map[string]struct {
		podIP                  string
		args                   []string
		wantHealth, wantMetric string
		wantErr                string
	}{
		"off by default":          {podIP: "10.0.0.7"},
		"health on the pod's IP":  {podIP: "10.0.0.7", args: []string{"--healthcheck-port=51515"}, wantHealth: "10.0.0.7:51515"},
		"health without a pod IP": {args: []string{"--healthcheck-port=51515"}, wantHealth: ":51515"},
		"health on any free port": {podIP: "127.0.0.1", args: []string{"--healthcheck-port=0"}, wantHealth: "127.0.0.1:0"},
		"negative health port":    {args: []string{"--healthcheck-port=-5"}},
		"health port too large":   {args: []string{"--healthcheck-port=65536"}, wantErr: "--healthcheck-port 65536"},
		"metrics":                 {args: []string{"--metrics-bind-address=10.0.0.7:8080"}, wantMetric: "10.0.0.7:8080"},
		"metrics off":             {args: []string{"--metrics-bind-address=0"}},
		"metrics without a port":  {args: []string{"--metrics-bind-address=10.0.0.7"}, wantErr: `--metrics-bind-address "10.0.0.7": want host:port or 0`},
		"metrics port not a port": {args: []string{"--metrics-bind-address=:http"}, wantErr: `port "http" is not a port number`},
		"metrics on the health port": {podIP: "10.0.0.7", args: []string{"--healthcheck-port=51515", "--metrics-bind-address=:51515"},
			wantErr: "port 51515 is --healthcheck-port's"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			env := map[string]string{"NODE_NAME": "n1", "POD_NAMESPACE": "ns"}
			if tc.podIP != "" {
				env[PodIPEnv] = tc.podIP
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
			if o.HealthAddress != tc.wantHealth || o.MetricsAddress != tc.wantMetric {
				t.Errorf("health %q, metrics %q; want %q, %q", o.HealthAddress, o.MetricsAddress, tc.wantHealth, tc.wantMetric)
			}
		})
	}
}
