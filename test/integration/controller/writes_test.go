package controller

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	cdv1beta1 "cdplane/api/v1beta1"
)

// reconciles reads controller-runtime's count of finished ComputeDomain reconciles.
func reconciles(t *testing.T) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "computedomain" {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// membershipWrites counts the apiserver's write requests on ComputeDomains and cliques.
func membershipWrites(t *testing.T) float64 {
	t.Helper()
	total := 0.0
	for _, resource := range []string{"computedomains", "computedomaincliques"} {
		for _, verb := range []string{"APPLY", "PATCH", "PUT", "POST", "DELETE"} {
			total += apiserverSum(t, map[string]string{"resource": resource, "verb": verb})
		}
	}
	return total
}

func apiserverSum(t *testing.T, match map[string]string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := testCluster.MetricSum(ctx, "apiserver_request_total", match)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestWritesOnlyOnChange: a reconcile that finds membership and status as they are writes
// nothing. Not parallel, so that the reconcile count is this test's own.
func TestWritesOnlyOnChange(t *testing.T) {
	e := newEnv(t, true)
	cd := e.createCD("steady", 2)
	d1 := e.startDaemon(cd, e.addNode(cd, "n1"), testClique)
	e.startDaemon(cd, e.addNode(cd, "n2"), testClique)
	e.waitStatus(cd, cdv1beta1.StatusReady, 20*time.Second)

	clique := &cdv1beta1.ComputeDomainClique{}
	cliqueKey := client.ObjectKey{Namespace: e.driverNS, Name: cdv1beta1.CliqueName(string(cd.UID), testClique)}
	settled := func() (string, string) {
		if err := e.c.Get(e.ctx(), cliqueKey, clique); err != nil {
			t.Fatal(err)
		}
		return e.getCD(cd).ResourceVersion, clique.ResourceVersion
	}
	// Ready is written in the same pass as the last clique change, after it: nothing is
	// pending now.
	cdRV, cliqueRV := settled()
	writesBefore := membershipWrites(t)

	// An event that changes nothing membership depends on: a daemon pod's unrelated label.
	before := reconciles(t)
	touch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"yes"}}}`))
	if err := e.c.Patch(e.ctx(), &corev1.Pod{ObjectMeta: d1.pod.ObjectMeta}, touch); err != nil {
		t.Fatal(err)
	}
	e.eventually(2*time.Minute, "the touch reconciled", func() (bool, error) { return reconciles(t) > before, nil })
	// The server drops a write that changes nothing, so count the requests as well.
	if n := membershipWrites(t) - writesBefore; n != 0 {
		t.Errorf("a reconcile with nothing to change sent %v writes of ComputeDomains or cliques", n)
	}
	if gotCD, gotClique := settled(); gotCD != cdRV || gotClique != cliqueRV {
		t.Errorf("a reconcile with nothing to change wrote: ComputeDomain %s -> %s, clique %s -> %s", cdRV, gotCD, cliqueRV, gotClique)
	}
}
