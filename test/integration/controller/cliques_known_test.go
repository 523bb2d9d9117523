package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/metrics"
)

// heldCliques is a cache whose cliques are what the test last put in it (none before): a cache
// that has not seen what happened to them on the server since.
type heldCliques struct {
	client.Client
	mu      sync.Mutex
	cliques []cdv1beta1.ComputeDomainClique
}

func (h *heldCliques) hold(c ...cdv1beta1.ComputeDomainClique) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cliques = c
}

func (h *heldCliques) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if cl, ok := list.(*cdv1beta1.ComputeDomainCliqueList); ok {
		h.mu.Lock()
		defer h.mu.Unlock()
		cl.Items = append([]cdv1beta1.ComputeDomainClique(nil), h.cliques...)
		return nil
	}
	return h.Client.List(ctx, list, opts...)
}

// cliqueReads is the apiserver reader of a reconciler, counting its reads of cliques.
type cliqueReads struct {
	client.Reader
	mu sync.Mutex
	n  int
}

func (c *cliqueReads) count(obj any) {
	switch o := obj.(type) {
	case *cdv1beta1.ComputeDomainClique, *cdv1beta1.ComputeDomainCliqueList:
	case client.Object:
		if o.GetObjectKind().GroupVersionKind().Kind != "ComputeDomainClique" {
			return
		}
	case client.ObjectList:
		if o.GetObjectKind().GroupVersionKind().Kind != "ComputeDomainCliqueList" {
			return
		}
	default:
		return
	}
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

func (c *cliqueReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.count(obj)
	return c.Reader.Get(ctx, key, obj, opts...)
}

func (c *cliqueReads) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.count(list)
	return c.Reader.List(ctx, list, opts...)
}

func (c *cliqueReads) take() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = 0
	return n
}

// TestKnownCliquesAreWrittenOnTheirVersion: a clique the controller knows as its own is written
// on the condition that the apiserver still holds it at the version known, with no read before;
// where the apiserver holds something else (changed by someone since, replaced by a foreign
// object of the same name, deleted), the write does not land and the clique is read fresh and
// checked as one the controller does not know: written when it is still the plane's or gone,
// refused when it is someone else's.
func TestKnownCliquesAreWrittenOnTheirVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	cd := e.createCD("known", 8)
	owner, err := e.daemonSetRef(cd)
	if err != nil {
		t.Fatal(err)
	}
	e.stopMgr() // the reconciler below makes every pass
	cache, reads := &heldCliques{Client: testCluster.Client}, &cliqueReads{Reader: testCluster.Client}
	r := e.reconcilerReading(cache, reads, true)
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: cd.Namespace, Name: cd.Name}}
	key := client.ObjectKey{Namespace: e.driverNS, Name: cdv1beta1.CliqueName(string(cd.UID), testClique)}
	var nodes []string
	// join adds a node and makes a pass, with the cache holding the clique as given.
	join := func(held ...cdv1beta1.ComputeDomainClique) {
		t.Helper()
		nodes = append(nodes, e.addNode(cd, fmt.Sprintf("n%d", len(nodes))))
		e.fakeDaemonPod(cd, nodes[len(nodes)-1], testClique, &owner)
		cache.hold(held...)
		if _, err := r.Reconcile(context.Background(), req); err != nil {
			t.Fatalf("pass after %s joined: %v", nodes[len(nodes)-1], err)
		}
	}
	onServer := func() (*cdv1beta1.ComputeDomainClique, error) {
		c := &cdv1beta1.ComputeDomainClique{}
		return c, e.c.Get(e.ctx(), key, c)
	}
	lists := func(c *cdv1beta1.ComputeDomainClique, want []string) bool {
		got := sets.New[string]()
		for _, d := range c.Daemons {
			got.Insert(d.NodeName)
		}
		return got.Equal(sets.New(want...)) && c.Labels[cdv1beta1.ComputeDomainLabel] == string(cd.UID)
	}
	mustOnServer := func(what string) *cdv1beta1.ComputeDomainClique {
		t.Helper()
		c, err := onServer()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !lists(c, nodes) {
			t.Fatalf("%s: the clique lists %+v with labels %v, want %v", what, c.Daemons, c.Labels, nodes)
		}
		return c
	}

	// Unknown (not in the cache): read fresh, then written.
	join()
	mine := mustOnServer("a new clique")
	if n := reads.take(); n != 1 {
		t.Errorf("a new clique was read %d times before it was written, want 1", n)
	}

	// Known, and the apiserver holds it at that version: written with no read.
	join(*mine)
	mine = mustOnServer("a known clique")
	if n := reads.take(); n != 0 {
		t.Errorf("a known clique held at the known version was read %d times before it was written, want 0", n)
	}

	// Changed on the server by someone else since: read fresh, still the plane's, written.
	touched := mine.DeepCopy()
	touched.Annotations = map[string]string{"touched-by": "someone"}
	if err := e.c.Update(e.ctx(), touched); err != nil {
		t.Fatal(err)
	}
	join(*mine)
	mine = mustOnServer("a known clique changed on the server since")
	if n := reads.take(); n != 1 {
		t.Errorf("a known clique changed since was read %d times, want 1", n)
	}

	// Replaced by a foreign object of the same name, which the plane-scoped cache cannot show:
	// refused, the foreign object untouched.
	if err := e.c.Delete(e.ctx(), mine); err != nil {
		t.Fatal(err)
	}
	foreign := &cdv1beta1.ComputeDomainClique{}
	foreign.Name, foreign.Namespace = key.Name, key.Namespace
	foreign.Labels = map[string]string{"owner": "someone-else"}
	foreign.Daemons = []cdv1beta1.ComputeDomainDaemonInfo{{NodeName: "elsewhere", IPAddress: "127.0.0.9", CliqueID: testClique, Index: 0}}
	if err := e.c.Create(e.ctx(), foreign); err != nil {
		t.Fatal(err)
	}
	refused := promtest.ToFloat64(metrics.ForeignRefusals.WithLabelValues("", "v1beta1.ComputeDomainClique"))
	join(*mine)
	if got, err := onServer(); err != nil || got.ResourceVersion != foreign.ResourceVersion {
		t.Errorf("the foreign clique was written or deleted (err=%v): %+v", err, got)
	}
	if d := promtest.ToFloat64(metrics.ForeignRefusals.WithLabelValues("", "v1beta1.ComputeDomainClique")) - refused; d != 1 {
		t.Errorf("%v refusals counted, want 1", d)
	}

	// Gone from the server (the foreign one deleted) while the cache still shows the plane's:
	// read fresh, absent, written again.
	if err := e.c.Delete(e.ctx(), foreign); err != nil {
		t.Fatal(err)
	}
	join(*mine)
	mustOnServer("a known clique deleted on the server since")
}
