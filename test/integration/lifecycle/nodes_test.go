package lifecycle

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/testutil"
)

// reRegister deletes node name and creates it again, as a kubelet registers a node that was
// deleted: same name, new UID, none of the labels an administrator set.
func reRegister(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	old := &corev1.Node{}
	must(t, testCluster.Client.Get(ctx, client.ObjectKey{Name: name}, old))
	must(t, testCluster.Client.Delete(ctx, old))
	testutil.Eventually(t, time.Minute, "node "+name+" gone", func() (bool, error) {
		err := testCluster.Client.Get(ctx, client.ObjectKey{Name: name}, &corev1.Node{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	must(t, testCluster.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}))
}

func nodePlane(t *testing.T, name string) string {
	t.Helper()
	n := &corev1.Node{}
	must(t, testCluster.Client.Get(context.Background(), client.ObjectKey{Name: name}, n))
	return n.Labels[cdv1beta1.ControlPlaneLabel]
}

// TestReRegisteredNodeIsReported: `cdplane assign node` records the assignment where only
// administrators write, so a node that is deleted and registers again without its plane label
// is reported by `cdplane assign node --check` with the command that restores it, and that
// command does; a deleted node that has not come back is mentioned without failing the check;
// `cdplane unassign node` forgets the assignment.
func TestReRegisteredNodeIsReported(t *testing.T) {
	ctx := context.Background()
	const id = "plane-n"
	names := []string{"node-reregistered", "node-gone"}
	for _, name := range names {
		must(t, testCluster.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}))
		t.Cleanup(func() {
			_ = testCluster.Client.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		})
		cliSays(t, 0, []string{`assigned to control plane "plane-n"`}, "assign", "node", name, "--control-plane-id", id)
	}
	cliSays(t, 0, []string{`2 assigned node(s) carry control plane "plane-n"'s label`}, "assign", "node", "--check", "--control-plane-id", id)

	reRegister(t, "node-reregistered")
	must(t, testCluster.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-gone"}}))
	out := cliSays(t, 1, []string{
		`node node-reregistered was assigned to control plane "plane-n" but its label is gone (re-registered?): run cdplane assign node node-reregistered --control-plane-id plane-n`,
		`node node-gone was assigned to control plane "plane-n" and does not exist`,
	}, "assign", "node", "--check", "--control-plane-id", id)
	if strings.Count(out, "label is gone") != 1 {
		t.Errorf("the check reports an absent node as unlabelled:\n%s", out)
	}

	cliSays(t, 0, []string{"label " + cdv1beta1.ControlPlaneLabel + "=plane-n set on node node-reregistered"}, "assign", "node", "node-reregistered", "--control-plane-id", id)
	if got := nodePlane(t, "node-reregistered"); got != id {
		t.Fatalf("after assigning again, the node's plane label is %q, want %q", got, id)
	}
	// Forgetting the absent node: its assignment leaves the record, and the check passes.
	cliSays(t, 0, []string{"node-gone"}, "unassign", "node", "node-gone", "--control-plane-id", id)
	cliSays(t, 0, []string{`1 assigned node(s) carry control plane "plane-n"'s label`}, "assign", "node", "--check", "--control-plane-id", id)

	// Unassigned, a re-registered node is not reported.
	cliSays(t, 0, []string{`unassigned from control plane "plane-n"`}, "unassign", "node", "node-reregistered", "--control-plane-id", id)
	reRegister(t, "node-reregistered")
	out = cliSays(t, 0, nil, "assign", "node", "--check", "--control-plane-id", id)
	if strings.Contains(out, "node-reregistered") {
		t.Errorf("the check reports an unassigned node:\n%s", out)
	}
}
