package api

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/testutil"
)

// applyDaemons server-side applies a clique holding only the given daemons, as fieldManager.
func applyDaemons(t *testing.T, ns, name, manager string, daemons ...cdv1beta1.ComputeDomainDaemonInfo) error {
	t.Helper()
	c := testutil.MakeClique(name, ns).Obj()
	c.Daemons = daemons
	// A typed object sent as an apply patch is what older clients of the API do.
	return testCluster.Client.Patch(ctxT(t), c, client.Apply, client.FieldOwner(manager), client.ForceOwnership) //nolint:staticcheck // deliberately the typed-object apply
}

// TestCliqueDaemonsAreWrittenWhole: a clique's daemons are an atomic list (the controller, their
// one writer, writes them whole): an apply replaces the list, whoever wrote it before, and keeps
// no per-entry managed fields. (Node names are unique by the controller's construction, not by
// the API server: see internal/controller/membership's tests.)
func TestCliqueDaemonsAreWrittenWhole(t *testing.T) {
	t.Parallel()
	ns := testCluster.Namespace(t, nil)
	d := func(node string, index int) cdv1beta1.ComputeDomainDaemonInfo {
		return cdv1beta1.ComputeDomainDaemonInfo{NodeName: node, IPAddress: "127.0.0.1", CliqueID: "c.1", Index: index, Status: "NotReady"}
	}
	read := func() *cdv1beta1.ComputeDomainClique {
		t.Helper()
		got := &cdv1beta1.ComputeDomainClique{}
		if err := testCluster.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "uid.c.1"}, got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if err := applyDaemons(t, ns, "uid.c.1", "writer-a", d("node-a", 0), d("node-c", 2)); err != nil {
		t.Fatal(err)
	}
	// Another writer's list replaces it: nothing of writer-a's entries stays.
	if err := applyDaemons(t, ns, "uid.c.1", "writer-b", d("node-b", 1)); err != nil {
		t.Fatal(err)
	}
	got := read()
	if diff := cmp.Diff([]cdv1beta1.ComputeDomainDaemonInfo{d("node-b", 1)}, got.Daemons); diff != "" {
		t.Errorf("daemons after a second applier (-want +got):\n%s", diff)
	}
	for _, mf := range got.ManagedFields {
		if strings.Contains(mf.FieldsV1.GetRawString(), `k:{\"nodeName\"`) {
			t.Errorf("manager %s owns a daemons entry by key: %s", mf.Manager, mf.FieldsV1.GetRawString())
		}
	}
}

func TestCliqueSizeLimit(t *testing.T) {
	t.Parallel()
	ns := testCluster.Namespace(t, nil)
	build := func(name string, n int) *cdv1beta1.ComputeDomainClique {
		w := testutil.MakeClique(name, ns)
		for i := range n {
			w.Daemon(fmt.Sprintf("node-%04d", i), "127.0.0.1", "c.1", i, "Ready")
		}
		return w.Obj()
	}
	if err := testCluster.Client.Create(ctxT(t), build("fits", cdv1beta1.MaxDaemonsPerClique)); err != nil {
		t.Errorf("256 daemons refused: %v", err)
	}
	err := testCluster.Client.Create(ctxT(t), build("too-many", cdv1beta1.MaxDaemonsPerClique+1))
	if err == nil || !strings.Contains(err.Error(), "daemons: Too many: 257: must have at most 256 items") {
		t.Errorf("257 daemons: got %v, want a Too many error naming daemons", err)
	}
}

func TestStatusNodesLimit(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	ns := testCluster.Namespace(t, nil)
	cd := testutil.MakeComputeDomain("big").Namespace(ns).Obj()
	if err := testCluster.Client.Create(ctx, cd); err != nil {
		t.Fatal(err)
	}
	set := func(n int) error {
		cd.Status.Nodes = nil
		for i := range n {
			cd.Status.Nodes = append(cd.Status.Nodes, cdv1beta1.ComputeDomainNode{
				Name: fmt.Sprintf("node-%05d", i), IPAddress: "127.0.0.1", CliqueID: "c.1", Index: i % 18, Status: "Ready",
			})
		}
		return testCluster.Client.Status().Update(ctx, cd)
	}
	if err := set(cdv1beta1.MaxStatusNodes + 1); err == nil || !strings.Contains(err.Error(), "status.nodes: Too many: 4097") {
		t.Errorf("4097 status.nodes: got %v, want a Too many error", err)
	}
	if err := set(cdv1beta1.MaxStatusNodes); err != nil {
		t.Errorf("4096 status.nodes refused: %v", err)
	}
}

func TestCliqueIsGarbageCollectedWithItsDaemonSet(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	ns := testCluster.Namespace(t, nil)
	labels := map[string]string{"app": "gc-test"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "computedomain-daemon-gc", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"no-such-node": "true"},
					Containers:   []corev1.Container{{Name: "c", Image: "example.invalid/none"}},
				},
			},
		},
	}
	if err := testCluster.Client.Create(ctx, ds); err != nil {
		t.Fatal(err)
	}
	clique := testutil.MakeClique("uid.c.1", ns).Daemon("n", "127.0.0.1", "c.1", 0, "").OwnedBy(metav1.OwnerReference{
		APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}).Obj()
	if err := testCluster.Client.Create(ctx, clique); err != nil {
		t.Fatal(err)
	}
	if err := testCluster.Client.Delete(ctx, ds, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := testCluster.Client.Get(ctx, client.ObjectKeyFromObject(clique), &cdv1beta1.ComputeDomainClique{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err != nil {
		t.Fatalf("clique still present 30s after its DaemonSet was deleted: %v", err)
	}
}
