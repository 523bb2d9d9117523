package kubeletplugin

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
)

// TestNodeMovedBetweenPlanesKeepsTheNewPluginsSockets: a node moves to another control plane,
// so the new plane's plugin starts while the old plane's is still stopping, on the same host
// directories and under the driver's socket names. The new plugin takes the sockets over; the
// old one, stopping last, must leave them alone, or the kubelet's plugin watcher deregisters the
// driver and the node takes no claim until the new plugin is restarted. After the old plugin
// stopped, both sockets are still there and the new plugin answers the kubelet on them.
func TestNodeMovedBetweenPlanesKeepsTheNewPluginsSockets(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	suffix := e.ns[len(e.ns)-5:]
	old := e.addNode(52, inPlane("mv-a-"+suffix))
	old.start(4)

	// The administrator moves the node to plane b; b's plugin starts beside a's.
	obj := &corev1.Node{}
	if err := e.C.Get(e.Ctx(), client.ObjectKey{Name: old.name}, obj); err != nil {
		t.Fatal(err)
	}
	orig := obj.DeepCopy()
	obj.Labels[cdv1beta1.ControlPlaneLabel] = "mv-b-" + suffix
	if err := e.C.Patch(e.Ctx(), obj, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	moved := &node{e: e, name: old.name, dir: old.dir, clique: old.clique, plane: "mv-b-" + suffix, sim: old.sim}
	moved.start(4)

	old.stop()
	for _, socket := range []string{
		moved.path("registry", cdv1beta1.DriverName+"-reg.sock"),
		moved.path("plugin", "dra.sock"),
	} {
		if _, err := os.Stat(socket); err != nil {
			t.Fatalf("after the old plane's plugin stopped: %v: it removed the new plugin's socket", err)
		}
	}
	// The kubelet's plugin watcher registers the plugin at the socket again.
	_ = moved.conn.Close()
	moved.connect()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := moved.dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{}); err != nil {
		t.Fatalf("the new plane's plugin on its DRA socket: %v", err)
	}
}
