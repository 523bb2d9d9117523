package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/metrics"
	"cdplane/internal/testutil"
)

// TestManyCliquesInOnePassAreReadFreshInOneList: a pass that writes more cliques than it reads
// one by one reads them all from the apiserver in one list, and still refuses the one whose name
// an object of someone else holds (not in the plane-scoped cache), writing the others.
func TestManyCliquesInOnePassAreReadFreshInOneList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	const n = 6
	cd := e.createCD("listed", n)
	owner, err := e.daemonSetRef(cd)
	if err != nil {
		t.Fatal(err)
	}
	e.stopMgr() // one pass, by the reconciler below, writes all the cliques
	uid := string(cd.UID)
	prefix := strings.TrimSuffix(testClique, ".1")
	for i := range n {
		e.fakeDaemonPod(cd, e.addNode(cd, fmt.Sprintf("n%d", i)), fmt.Sprintf("%s.%d", prefix, i+1), &owner)
	}
	// The name of clique 3 is taken by an object nobody of this plane created.
	foreign := testutil.MakeClique(cdv1beta1.CliqueName(uid, prefix+".3"), e.driverNS).Daemon("elsewhere", "127.0.0.9", prefix+".3", 0, "Ready").Obj()
	foreign.Labels = map[string]string{"owner": "someone-else"}
	if err := e.c.Create(e.ctx(), foreign); err != nil {
		t.Fatal(err)
	}

	r := e.reconciler(testCluster.Client, true)
	refused := promtest.ToFloat64(metrics.ForeignRefusals.WithLabelValues("", "v1beta1.ComputeDomainClique"))
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: cd.Namespace, Name: cd.Name}}); err != nil {
		t.Fatalf("reconcile: %v", err)
	}

	for i := range n {
		name := cdv1beta1.CliqueName(uid, fmt.Sprintf("%s.%d", prefix, i+1))
		got := &cdv1beta1.ComputeDomainClique{}
		if err := e.c.Get(e.ctx(), client.ObjectKey{Namespace: e.driverNS, Name: name}, got); err != nil {
			t.Fatalf("clique %s: %v", name, err)
		}
		if i == 2 {
			if got.ResourceVersion != foreign.ResourceVersion || got.Labels[cdv1beta1.ComputeDomainLabel] != "" {
				t.Errorf("the foreign clique %s was written: labels %v, resourceVersion %s -> %s", name, got.Labels, foreign.ResourceVersion, got.ResourceVersion)
			}
			continue
		}
		if got.Labels[cdv1beta1.ComputeDomainLabel] != uid || len(got.Daemons) != 1 || !strings.HasSuffix(got.Daemons[0].NodeName, fmt.Sprintf("n%d", i)) {
			t.Errorf("clique %s: labels %v, daemons %+v", name, got.Labels, got.Daemons)
		}
	}
	if d := promtest.ToFloat64(metrics.ForeignRefusals.WithLabelValues("", "v1beta1.ComputeDomainClique")) - refused; d != 1 {
		t.Errorf("%v refusals counted, want 1", d)
	}
}
