package e2e

import (
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"cdplane/internal/sim"
	"cdplane/internal/sim/controlplane"
)

// TestSimKubeletsAreClassifiedAsKubelets: the simulated kubelets are not administrators. Their
// Lease and node status writes go through the apiserver's node-high priority level and the rest
// of their requests through system, as a real kubelet's do, never exempt: an exempt kubelet
// storm borrows the seats of every other level (at 2,304 nodes it starved the plugins' watches).
func TestSimKubeletsAreClassifiedAsKubelets(t *testing.T) {
	e2eOnly(t)
	if !simState.KubeletIdentity {
		t.Fatal("the simulated cluster's state says its kubelets run as the administrator")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", simState.ControlPlane.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	m, err := controlplane.ReadMetrics(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	const dispatched = "apiserver_flowcontrol_dispatched_requests_total"
	for schema, level := range map[string]string{sim.KubeletHighFlowSchema: "node-high", sim.KubeletFlowSchema: "system"} {
		if n := m.Sum(dispatched, map[string]string{"flow_schema": schema, "priority_level": level}); n < 1 {
			t.Errorf("no request of the simulated kubelets dispatched by FlowSchema %s at priority level %s", schema, level)
		}
	}
}
