package lifecycle

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
)

// TestAssignSeveralNodes: `assign node` takes several names or a label selector (-l) and
// assigns each node; `unassign node` likewise; a selector that selects nothing is an error.
func TestAssignSeveralNodes(t *testing.T) {
	ctx := context.Background()
	m, _ := newManager(t)
	leaveNothing(t, "")
	must(t, m.InstallPrerequisites(ctx, nil))
	names := []string{"several-a", "several-b", "several-c"}
	for i, name := range names {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"cdplane.test/rack": "sel"}}}
		if i == 2 {
			n.Labels = nil // named, not selected
		}
		must(t, testCluster.Client.Create(ctx, n))
		t.Cleanup(func() { _ = testCluster.Client.Delete(context.Background(), n) })
	}
	planeOf := func(name string) string {
		n := &corev1.Node{}
		must(t, testCluster.Client.Get(ctx, client.ObjectKey{Name: name}, n))
		return n.Labels[cdv1beta1.ControlPlaneLabel]
	}

	code, out := runCLI(t, "assign", "node", "-l", "cdplane.test/rack=sel", "--control-plane-id", "plane-s")
	if code != 0 || planeOf("several-a") != "plane-s" || planeOf("several-b") != "plane-s" || planeOf("several-c") != "" {
		t.Fatalf("assign node -l: exit %d, planes %q %q %q; want 0, plane-s plane-s and none:\n%s", code, planeOf("several-a"), planeOf("several-b"), planeOf("several-c"), out)
	}
	code, out = runCLI(t, "assign", "node", "several-b", "several-c", "--control-plane-id", "plane-s")
	if code != 0 || planeOf("several-c") != "plane-s" || !strings.Contains(out, "node several-b already assigned to control plane \"plane-s\": nothing changed") {
		t.Fatalf("assign node several-b several-c: exit %d, several-c's plane %q:\n%s", code, planeOf("several-c"), out)
	}
	code, out = runCLI(t, "unassign", "node", "several-a", "several-b", "several-c", "--control-plane-id", "plane-s")
	if code != 0 || planeOf("several-a")+planeOf("several-b")+planeOf("several-c") != "" {
		t.Fatalf("unassign node of three: exit %d:\n%s", code, out)
	}
	if code, out = runCLI(t, "assign", "node", "-l", "cdplane.test/rack=none", "--control-plane-id", "plane-s"); code != 1 || !strings.Contains(out, `-l "cdplane.test/rack=none" selects no node`) {
		t.Fatalf("assign node -l selecting nothing: exit %d:\n%s", code, out)
	}
}
