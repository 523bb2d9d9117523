package kubeletplugin

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	cdv1beta1 "cdplane/api/v1beta1"
)

// TestUnprepare: unprepare is idempotent, removes the CDI spec, and removes the node label only
// when it is ours and no other claim of the domain on the node still needs it.
func TestUnprepare(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.addNode(9)
	n.start(4)
	cd := e.createCD(e.ns, "unprep")
	e.setClique(cd, n, cdv1beta1.StatusReady)
	a := e.channelClaim(e.ns, "a", n, cd, "")
	b := e.channelClaimOn(e.ns, "b", n, cd, "", 1)
	n.mustPrepare(a)
	n.mustPrepare(b)

	if msg := n.unprepare(a.Namespace, a.Name, a.UID); msg != "" {
		t.Fatalf("unprepare a: %s", msg)
	}
	if _, ok := n.cdiSpec(a.UID); ok {
		t.Error("a's CDI spec left after unprepare")
	}
	if l := n.label(); l != string(cd.UID) {
		t.Errorf("node label %q after unpreparing a while b still runs, want %s", l, cd.UID)
	}
	if msg := n.unprepare(a.Namespace, a.Name, a.UID); msg != "" {
		t.Errorf("second unprepare of a: %s", msg)
	}
	if msg := n.unprepare(b.Namespace, b.Name, b.UID); msg != "" {
		t.Fatalf("unprepare b: %s", msg)
	}
	if l := n.label(); l != "" {
		t.Errorf("node label %q after the domain's last claim left", l)
	}
	if msg := n.unprepare(b.Namespace, b.Name, b.UID); msg != "" {
		t.Errorf("second unprepare of b: %s", msg)
	}
	if msg := n.unprepare(e.ns, "never-seen", types.UID("6d3f1c9e-0000-4000-8000-000000000000")); msg != "" {
		t.Errorf("unprepare of an unknown claim: %s", msg)
	}
	if cp := n.checkpoint(); len(cp.Claims) != 0 {
		t.Errorf("checkpoint still lists %v", cp.Claims)
	}

	// A label that is not ours (the node moved on to another domain) is left alone.
	c := e.channelClaimOn(e.ns, "c", n, cd, "", 2)
	n.mustPrepare(c)
	n.setLabel("someone-else")
	if msg := n.unprepare(c.Namespace, c.Name, c.UID); msg != "" {
		t.Fatalf("unprepare c: %s", msg)
	}
	if l := n.label(); l != "someone-else" {
		t.Errorf("unprepare changed a label that was not its own to %q", l)
	}
}
