package computedomain

import (
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestCreatedIsTrustedForWrittenTTL(t *testing.T) {
	c := newCreated()
	ds := createdKey{kind: "DaemonSet", key: client.ObjectKey{Namespace: "ns", Name: "a"}}
	rct := createdKey{kind: "ResourceClaimTemplate", key: ds.key}
	if c.recent(ds) {
		t.Fatal("recent before any create")
	}
	c.add(ds)
	if !c.recent(ds) || c.recent(rct) {
		t.Fatalf("after creating the DaemonSet: recent(DaemonSet)=%v recent(template of the same name)=%v, want true, false", c.recent(ds), c.recent(rct))
	}
	c.drop(ds)
	if c.recent(ds) {
		t.Fatal("recent after drop")
	}

	c.add(ds)
	c.at[ds] = time.Now().Add(-writtenTTL - time.Second)
	if c.recent(ds) {
		t.Error("a create older than writtenTTL is still trusted")
	}
	c.add(rct) // drops the expired record
	if _, ok := c.at[ds]; ok || len(c.at) != 1 {
		t.Errorf("records after a new create %v, want only the new one", c.at)
	}
}
