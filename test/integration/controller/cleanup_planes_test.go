package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller"
	"cdplane/internal/plane"
)

// TestNodeLabelCleanupStaysInItsPlane: the orphan cleanup of one plane removes a deleted
// domain's label from that plane's nodes only. Plane cleanup-a's and the legacy plane's
// cleaners run every 200ms; a node of plane cleanup-b (whose controller does not run) carries
// the label of a domain that does not exist, and keeps it.
func TestNodeLabelCleanupStaysInItsPlane(t *testing.T) {
	t.Parallel()
	const planeA, planeB = "cleanup-a", "cleanup-b"
	cleaner := func(id string) func(*controller.Options) {
		return func(o *controller.Options) { o.ControlPlaneID, o.CleanupInterval = id, 200*time.Millisecond }
	}
	e := newEnv(t, true, cleaner(planeA))
	newEnv(t, true, cleaner(""))

	labelledNode := func(name, planeID string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:   e.ns + "-" + name,
			Labels: plane.Stamp(planeID, map[string]string{cdv1beta1.ComputeDomainLabel: string(uuid.NewUUID())}),
		}}
		if err := e.c.Create(e.ctx(), n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.c.Delete(context.Background(), n) })
		return n
	}
	domainLabel := func(n *corev1.Node) (string, error) {
		cur := &corev1.Node{}
		err := e.c.Get(context.Background(), client.ObjectKeyFromObject(n), cur)
		return cur.Labels[cdv1beta1.ComputeDomainLabel], err
	}

	other := labelledNode("plane-b", planeB)
	// Each round's own nodes lose their label in some pass of each cleaner; a pass lists every
	// candidate before it removes any, so once the second round's labels are gone, passes that
	// had plane-b's node in view if they could see it at all have run to their end.
	for round := range 2 {
		own := []*corev1.Node{labelledNode(fmt.Sprintf("plane-a-%d", round), planeA), labelledNode(fmt.Sprintf("legacy-%d", round), "")}
		e.eventually(2*time.Minute, fmt.Sprintf("round %d: the orphan labels of plane-a's and the legacy plane's nodes removed", round), func() (bool, error) {
			for _, n := range own {
				if l, err := domainLabel(n); err != nil || l != "" {
					return false, err
				}
			}
			return true, nil
		})
	}
	if l, err := domainLabel(other); err != nil || l != other.Labels[cdv1beta1.ComputeDomainLabel] {
		t.Errorf("plane-b's node: domain label %q (err=%v) after other planes' cleanups, want %q kept", l, err, other.Labels[cdv1beta1.ComputeDomainLabel])
	}
}
