package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller"
)

// TestStatusSizeLimit: a domain larger than status.nodes can hold keeps per-node data in its
// cliques only, says so in a condition, and still reports per-clique counts and readiness. The
// test plays the daemons and kubelets directly: each pod is labelled with its clique and Ready.
func TestStatusSizeLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	fast := rest.CopyConfig(testCluster.Config)
	fast.QPS, fast.Burst = 1000, 2000
	c, err := client.New(fast, client.Options{Scheme: testCluster.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	const n = cdv1beta1.MaxStatusNodes + 1
	cd := e.createCD("huge", n)
	owner, err := e.daemonSetRef(cd)
	if err != nil {
		t.Fatal(err)
	}
	createReadyDaemons(t, c, e, cd, owner, n)

	got := e.waitStatus(cd, cdv1beta1.StatusReady, 3*time.Minute)
	if got.Status.Nodes != nil {
		t.Errorf("status.nodes has %d entries, want it omitted above %d", len(got.Status.Nodes), cdv1beta1.MaxStatusNodes)
	}
	cond := meta.FindStatusCondition(got.Status.Conditions, cdv1beta1.ConditionNodesInStatus)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != cdv1beta1.ReasonTooManyNodes {
		t.Errorf("NodesInStatus condition %+v, want False/%s", cond, cdv1beta1.ReasonTooManyNodes)
	}
	if got.Status.TotalNodes != n || got.Status.ReadyNodes != n || len(got.Status.Cliques) != (n+17)/18 {
		t.Errorf("counts: total=%d ready=%d cliques=%d", got.Status.TotalNodes, got.Status.ReadyNodes, len(got.Status.Cliques))
	}
	// The cliques and the status are written side by side (neither waits for the other), so
	// the cliques may still be on their way when the status reads Ready.
	e.eventually(time.Minute, "every daemon in its clique", func() (bool, error) {
		cliques := &cdv1beta1.ComputeDomainCliqueList{}
		if err := e.c.List(e.ctx(), cliques, client.InNamespace(e.driverNS)); err != nil {
			return false, err
		}
		total := 0
		for _, cl := range cliques.Items {
			total += len(cl.Daemons)
		}
		if len(cliques.Items) != (n+17)/18 || total != n {
			return false, fmt.Errorf("%d cliques holding %d daemons, want %d and %d", len(cliques.Items), total, (n+17)/18, n)
		}
		return true, nil
	})
}

// createReadyDaemons creates n Ready daemon pods of the domain (createReadyDaemon), 32 at a
// time, and fails the test on the first error.
func createReadyDaemons(t *testing.T, c client.Client, e *env, cd *cdv1beta1.ComputeDomain, owner metav1.OwnerReference, n int) {
	t.Helper()
	work := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := range work {
				if err := createReadyDaemon(c, e, cd, owner, i); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

func createReadyDaemon(c client.Client, e *env, cd *cdv1beta1.ComputeDomain, owner metav1.OwnerReference, i int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	uid := string(cd.UID)
	name := fmt.Sprintf("%s-h%05d", e.ns, i)
	if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{cdv1beta1.ComputeDomainLabel: uid}}}); err != nil {
		return err
	}
	if err := e.allocateClaim(c, cd, name); err != nil {
		return err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("d-%05d", i), Namespace: e.driverNS, Labels: map[string]string{
			cdv1beta1.ComputeDomainLabel: uid, cdv1beta1.CliqueIDLabel: fmt.Sprintf("00000000-0000-4000-8000-%012d.1", i/18),
		}, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: corev1.PodSpec{NodeName: name, Containers: []corev1.Container{{Name: "d", Image: "cdplane:test"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		return err
	}
	ip := fmt.Sprintf("127.2.%d.%d", i/250, i%250+1)
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	return c.Status().Update(ctx, pod)
}

// TestCleanupOfDeletedDomains: objects and node labels left by a domain that no longer exists
// are removed; those of a live domain and unlabelled objects are kept.
func TestCleanupOfDeletedDomains(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true, func(o *controller.Options) { o.CleanupInterval = 200 * time.Millisecond })
	live := e.createCD("live", 0)
	liveNode := e.addNode(live, "live")
	ghost := "00000000-dead-4000-8000-000000000000"
	labels := map[string]string{cdv1beta1.ComputeDomainLabel: ghost, "app.kubernetes.io/managed-by": "cdplane"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "computedomain-daemon-" + ghost, Namespace: e.driverNS, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{cdv1beta1.ComputeDomainLabel: ghost}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{cdv1beta1.ComputeDomainLabel: ghost}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "d", Image: "cdplane:test"}}},
			},
		},
	}
	notOurs := ds.DeepCopy()
	notOurs.Name, notOurs.Labels = "someone-elses", map[string]string{cdv1beta1.ComputeDomainLabel: ghost}
	staleNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.ns + "-stale", Labels: map[string]string{cdv1beta1.ComputeDomainLabel: ghost}}}
	for _, obj := range []client.Object{ds, notOurs, staleNode} {
		if err := e.c.Create(e.ctx(), obj); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), staleNode) })

	// This test's manager looks for orphans every 200ms.
	e.eventually(2*time.Minute, "orphans removed", func() (bool, error) {
		err := e.c.Get(context.Background(), client.ObjectKeyFromObject(ds), &appsv1.DaemonSet{})
		n := &corev1.Node{}
		if gerr := e.c.Get(context.Background(), client.ObjectKeyFromObject(staleNode), n); gerr != nil {
			return false, gerr
		}
		_, labelled := n.Labels[cdv1beta1.ComputeDomainLabel]
		return apierrors.IsNotFound(err) && !labelled, nil
	})
	if err := e.c.Get(e.ctx(), client.ObjectKeyFromObject(notOurs), &appsv1.DaemonSet{}); err != nil {
		t.Errorf("a DaemonSet the controller did not create was removed: %v", err)
	}
	n := &corev1.Node{}
	if err := e.c.Get(e.ctx(), client.ObjectKey{Name: liveNode}, n); err != nil || n.Labels[cdv1beta1.ComputeDomainLabel] != string(live.UID) {
		t.Errorf("the live domain's node lost its label: %v %v", n.Labels, err)
	}
}
