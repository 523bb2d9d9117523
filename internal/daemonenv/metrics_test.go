package daemonenv

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func TestMetricsArgsAndPorts(t *testing.T) {
	cases := map[string]struct {
		m         Metrics
		wantArgs  []string
		wantPorts []corev1.ContainerPort
	}{
		"off":          {m: Metrics{ControlPlaneID: "a"}},
		"legacy plane": {m: Metrics{Port: 8082}, wantArgs: []string{"--metrics-bind-address=$(POD_IP):8082"}, wantPorts: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 8082}}},
		"plane a": {
			m:         Metrics{Port: 9100, ControlPlaneID: "a"},
			wantArgs:  []string{"--metrics-bind-address=$(POD_IP):9100", "--control-plane-id=a"},
			wantPorts: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9100}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.wantArgs, tc.m.Args()); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPorts, tc.m.Ports()); diff != "" {
				t.Errorf("ports (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateMetricsPort(t *testing.T) {
	for port, want := range map[int]string{0: "", 8082: "", 65535: "", -1: "up to 65535", 65536: "up to 65535", 50000: "IMEX's", 50005: "IMEX's"} {
		err := ValidateMetricsPort("--daemon-metrics-port", port)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("port %d: %v, want %q", port, err, want)
		}
	}
}
