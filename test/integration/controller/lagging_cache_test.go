package controller

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/computedomain"
	"cdplane/internal/features"
)

// laggingCache is a cache that never sees the controller's own writes: it lists no cliques and
// hands out the domain without a status, as a cache a few seconds behind a busy apiserver does
// between two passes.
type laggingCache struct {
	client.Client
}

func (l laggingCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := l.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	if cl, ok := list.(*cdv1beta1.ComputeDomainCliqueList); ok {
		cl.Items = nil
	}
	return nil
}

func (l laggingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := l.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if cd, ok := obj.(*cdv1beta1.ComputeDomain); ok {
		cd.Status = cdv1beta1.ComputeDomainStatus{}
		cd.ResourceVersion = "1" // the version the cache is stuck at
	}
	return nil
}

// TestIndexesHoldWhileTheCacheLags: a pass that reads a cache which has not yet seen the
// previous pass's clique write keeps the indexes that write gave. Without remembering its own
// writes, the controller would take the written entry for absent and give index 0 to the joining
// node whose name sorts first, moving the index of the node that had it.
func TestIndexesHoldWhileTheCacheLags(t *testing.T) {
	t.Parallel()
	for _, cliques := range []bool{true, false} {
		t.Run(map[bool]string{true: "cliques", false: "status"}[cliques], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, cliques)
			cd := e.createCD("lagging", 2)
			owner, err := e.daemonSetRef(cd)
			if err != nil {
				t.Fatal(err)
			}
			e.stopMgr() // the reconciler below makes every pass
			r := e.reconciler(laggingCache{Client: testCluster.Client}, cliques)
			req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: cd.Namespace, Name: cd.Name}}

			late := e.addNode(cd, "zz-late")
			e.fakeDaemonPod(cd, late, testClique, &owner)
			if _, err := r.Reconcile(context.Background(), req); err != nil {
				t.Fatalf("first pass: %v", err)
			}
			if got := e.indexOf(cd, cliques, late); got != 0 {
				t.Fatalf("after the first pass %s has index %d, want 0", late, got)
			}

			early := e.addNode(cd, "aa-early") // sorts first
			e.fakeDaemonPod(cd, early, testClique, &owner)
			if _, err := r.Reconcile(context.Background(), req); err != nil {
				t.Fatalf("second pass: %v", err)
			}
			if got := e.indexOf(cd, cliques, late); got != 0 {
				t.Errorf("%s's index moved to %d under a lagging cache, want 0", late, got)
			}
			if got := e.indexOf(cd, cliques, early); got != 1 {
				t.Errorf("%s has index %d, want 1", early, got)
			}
		})
	}
}

// indexOf reads node's index from the apiserver: its clique's entry (cliques) or the domain's
// status.nodes; -2 when it has none.
func (e *env) indexOf(cd *cdv1beta1.ComputeDomain, cliques bool, node string) int {
	e.t.Helper()
	if cliques {
		c := &cdv1beta1.ComputeDomainClique{}
		key := client.ObjectKey{Namespace: e.driverNS, Name: cdv1beta1.CliqueName(string(cd.UID), testClique)}
		if err := testCluster.Client.Get(context.Background(), key, c); err != nil {
			e.t.Fatalf("reading clique: %v", err)
		}
		for _, d := range c.Daemons {
			if d.NodeName == node {
				return d.Index
			}
		}
		return -2
	}
	cur := &cdv1beta1.ComputeDomain{}
	if err := testCluster.Client.Get(context.Background(), client.ObjectKeyFromObject(cd), cur); err != nil {
		e.t.Fatalf("reading domain: %v", err)
	}
	for _, n := range cur.Status.Nodes {
		if n.Name == node {
			return n.Index
		}
	}
	return -2
}

// reconciler returns a reconciler of e's driver namespace that reads its cache through cache and
// the apiserver through the test cluster's client, with ComputeDomainCliques set to cliques: for
// tests that make the passes themselves (after e.stopMgr).
func (e *env) reconciler(cache client.Client, cliques bool) *computedomain.Reconciler {
	e.t.Helper()
	return e.reconcilerReading(cache, testCluster.Client, cliques)
}

// reconcilerReading is reconciler with reader as its way to the apiserver.
func (e *env) reconcilerReading(cache client.Client, reader client.Reader, cliques bool) *computedomain.Reconciler {
	e.t.Helper()
	gates := features.NewGates()
	if err := gates.SetFromMap(map[string]bool{string(features.ComputeDomainCliques): cliques}); err != nil {
		e.t.Fatal(err)
	}
	return computedomain.New(cache, reader, computedomain.Options{
		DriverNamespace: e.driverNS, DaemonImage: "cdplane:test", Gates: gates, DaemonFeatureGates: features.DaemonGates(gates),
	})
}

// unseenCreations is a cache that has not yet seen the DaemonSet and claim templates the
// controller created: it answers NotFound for them, as a cache does between the create and its
// watch event.
type unseenCreations struct {
	client.Client
}

func (u unseenCreations) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	switch obj.(type) {
	case *appsv1.DaemonSet, *resourcev1.ResourceClaimTemplate:
		return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
	}
	return u.Client.Get(ctx, key, obj, opts...)
}

// TestCreatesOnceWhileTheCacheLags: passes that start before the cache has seen the DaemonSet
// and claim templates an earlier pass created read them from the apiserver; they send no create
// that can only be refused as AlreadyExists.
func TestCreatesOnceWhileTheCacheLags(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	e.stopMgr() // the reconciler below makes every pass
	cd := e.createCD("created-once", 0)
	log := &writeLog{}
	recording, err := client.New(log.wrap(testCluster.Config, "created-once-test"), client.Options{Scheme: testCluster.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	r := e.reconciler(unseenCreations{Client: recording}, true)
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: cd.Namespace, Name: cd.Name}}
	for pass := range 3 {
		if _, err := r.Reconcile(context.Background(), req); err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
	}
	keys := e.objectsOf(cd)
	if _, _, rct := e.waitCreated(cd); rct == nil {
		t.Fatal("no workload claim template")
	}
	for collection, name := range map[string]string{
		"/apis/apps/v1/namespaces/" + e.driverNS + "/daemonsets":                        keys.ds.Name,
		"/apis/resource.k8s.io/v1/namespaces/" + e.driverNS + "/resourceclaimtemplates": keys.daemonTemplate.Name,
		"/apis/resource.k8s.io/v1/namespaces/" + e.ns + "/resourceclaimtemplates":       keys.workloadTemplate.Name,
	} {
		if diff := cmp.Diff(map[string]int{"POST": 1}, writesTo(log, collection, name)); diff != "" {
			t.Errorf("writes of %s/%s over three passes of a cache that has not seen it (-want +got):\n%s", collection, name, diff)
		}
	}
}
