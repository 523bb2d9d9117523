package computedomain

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	cdv1beta1 "cdplane/api/v1beta1"
)

func writtenClique(name, version string, nodes ...string) cdv1beta1.ComputeDomainClique {
	c := cdv1beta1.ComputeDomainClique{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: version}}
	for i, n := range nodes {
		c.Daemons = append(c.Daemons, cdv1beta1.ComputeDomainDaemonInfo{NodeName: n, Index: i})
	}
	return c
}

func names(cs []cdv1beta1.ComputeDomainClique) map[string]string {
	out := map[string]string{}
	for _, c := range cs {
		out[c.Name] = c.ResourceVersion
	}
	return out
}

// TestWrittenCliques: a remembered write is read over a cache showing an older version or none,
// and dropped once the cache shows it, shows a version written by someone else, or the record
// expired; a remembered delete hides the cached clique until the cache sees it go.
func TestWrittenCliques(t *testing.T) {
	cd := &cdv1beta1.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "ns", UID: "u1"}}
	w := newWritten()
	a := writtenClique("a", "10", "n1")
	w.wroteClique(cd, &a, "") // created
	b := writtenClique("b", "11", "n2", "n3")
	w.wroteClique(cd, &b, "5") // over version 5

	got := names(w.cliques(cd, []cdv1beta1.ComputeDomainClique{writtenClique("b", "5", "n2")}))
	if got["a"] != "10" || got["b"] != "11" || len(got) != 2 {
		t.Fatalf("lagging cache: got %v, want a@10 (created, not cached yet) and b@11 (cache at 5)", got)
	}
	// A second write of b while the cache still shows 5: the cache showing the first write
	// (11) is still behind.
	b2 := writtenClique("b", "12", "n2", "n3", "n4")
	w.wroteClique(cd, &b2, "11")
	if got := names(w.cliques(cd, []cdv1beta1.ComputeDomainClique{writtenClique("b", "11")})); got["b"] != "12" {
		t.Errorf("cache at the first of two writes: got %v, want b@12", got)
	}
	// The cache catches up with a and with b: the cached objects are read, records dropped.
	got = names(w.cliques(cd, []cdv1beta1.ComputeDomainClique{writtenClique("a", "10"), writtenClique("b", "12")}))
	if got["a"] != "10" || got["b"] != "12" || len(w.domain(cd).cliques) != 0 {
		t.Errorf("caught up: got %v, %d records left", got, len(w.domain(cd).cliques))
	}

	// Someone else wrote a after this controller did: the cache's version wins.
	a2 := writtenClique("a", "20", "n1")
	w.wroteClique(cd, &a2, "10")
	if got := names(w.cliques(cd, []cdv1beta1.ComputeDomainClique{writtenClique("a", "25")})); got["a"] != "25" {
		t.Errorf("overtaken: got %v, want the cache's a@25", got)
	}

	// A delete hides the cached clique until the cache shows it gone.
	w.deletedClique(cd, "a", "25")
	if got := names(w.cliques(cd, []cdv1beta1.ComputeDomainClique{writtenClique("a", "25")})); len(got) != 0 {
		t.Errorf("deleted, cache behind: got %v, want none", got)
	}
	if got := names(w.cliques(cd, nil)); len(got) != 0 || len(w.domain(cd).cliques) != 0 {
		t.Errorf("deleted, cache caught up: got %v, %d records left", got, len(w.domain(cd).cliques))
	}

	// An expired record is not trusted.
	c := writtenClique("c", "30", "n9")
	w.wroteClique(cd, &c, "")
	w.domain(cd).cliques["c"].at = time.Now().Add(-2 * writtenTTL)
	if got := names(w.cliques(cd, nil)); len(got) != 0 {
		t.Errorf("expired: got %v, want none", got)
	}

	// Another domain of the same name starts afresh.
	w.wroteClique(cd, &c, "")
	again := cd.DeepCopy()
	again.UID = "u2"
	if got := names(w.cliques(again, nil)); len(got) != 0 {
		t.Errorf("recreated domain: got %v, want none", got)
	}
}

// TestWrittenStatus: the status written is read while the cached domain is at a version it
// replaced, and the cache's once it shows the write or a later one.
func TestWrittenStatus(t *testing.T) {
	cd := &cdv1beta1.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "ns", UID: "u1", ResourceVersion: "3"}}
	w := newWritten()
	st := cdv1beta1.ComputeDomainStatus{Status: cdv1beta1.StatusReady, ReadyNodes: 2}
	w.wroteStatus(cd, st, "5", "3", "4") // the pass's finalizer patch made 4
	for _, tc := range []struct {
		cached string
		want   int32
	}{{"3", 2}, {"4", 2}, {"5", 0}} {
		cur := cd.DeepCopy()
		cur.ResourceVersion = tc.cached
		if got := w.status(cur).ReadyNodes; got != tc.want {
			t.Errorf("cache at %s: readyNodes %d, want %d", tc.cached, got, tc.want)
		}
	}
	cur := cd.DeepCopy()
	cur.ResourceVersion = "9" // a user's edit after the write
	cur.Status.ReadyNodes = 7
	w.wroteStatus(cd, st, "5", "3", "4")
	if got := w.status(cur).ReadyNodes; got != 7 {
		t.Errorf("overtaken: readyNodes %d, want the cache's 7", got)
	}
}

// TestWrittenForgetsLateWrites: a status write that ends after its domain was forgotten (deleted)
// is recorded again; nothing forgets that domain a second time, so the record is dropped once it
// expired and another domain's record is made. Reading and dropping make no records.
func TestWrittenForgetsLateWrites(t *testing.T) {
	gone := &cdv1beta1.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Name: "gone", Namespace: "ns", UID: "u1", ResourceVersion: "3"}}
	w := newWritten()
	st := cdv1beta1.ComputeDomainStatus{Status: cdv1beta1.StatusNotReady, ReadyNodes: 1}
	w.wroteStatus(gone, st, "5", "3")
	w.forget(types.NamespacedName{Namespace: "ns", Name: "gone"})
	w.wroteStatus(gone, st, "6", "5") // the background write ends after the delete
	if len(w.domains) != 1 {
		t.Fatalf("after the late write: %d records, want 1", len(w.domains))
	}

	other := &cdv1beta1.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "ns", UID: "u2", ResourceVersion: "1"}}
	w.status(other)
	w.cliques(other, nil)
	w.unknownStatus(other)
	w.unknownClique(other, "c")
	if len(w.domains) != 1 {
		t.Errorf("reading and dropping another domain's writes made records: %d, want 1", len(w.domains))
	}

	w.wroteStatus(other, st, "2", "1")
	if len(w.domains) != 2 {
		t.Fatalf("a recent record was dropped: %d records, want 2", len(w.domains))
	}
	for _, d := range w.domains {
		d.status.at = time.Now().Add(-2 * writtenTTL)
	}
	third := &cdv1beta1.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Name: "third", Namespace: "ns", UID: "u3"}}
	c := writtenClique("c", "7", "n1")
	w.wroteClique(third, &c, "")
	if len(w.domains) != 1 || w.domains[types.NamespacedName{Namespace: "ns", Name: "third"}] == nil {
		t.Errorf("expired records kept: %d records, want only the new one", len(w.domains))
	}
}
