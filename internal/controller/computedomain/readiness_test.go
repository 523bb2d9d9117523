package computedomain

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cdv1beta1 "cdplane/api/v1beta1"
)

func daemonPod(name, domainUID string, ready bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}
	if domainUID != "" {
		p.Labels = map[string]string{cdv1beta1.ComputeDomainLabel: domainUID}
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: status}}
	return p
}

// TestPodReadinessFollowsTheDomainsPods: the readiness kept from pod events says a domain's pods
// are all Ready only when at least numNodes of them are and none is not, follows a pod whose
// label changes, counts a terminating pod as not Ready, and forgets deleted pods.
func TestPodReadinessFollowsTheDomainsPods(t *testing.T) {
	p := newPodReadiness()
	check := func(what, uid string, numNodes int, want bool) {
		t.Helper()
		if got := p.allReady(uid, numNodes); got != want {
			t.Errorf("%s: allReady(%s, %d) = %v, want %v", what, uid, numNodes, got, want)
		}
	}
	check("no pods, numNodes 0", "d1", 0, true)
	check("no pods, numNodes 2", "d1", 2, false)

	a, b := daemonPod("a", "d1", false), daemonPod("b", "d1", true)
	p.observe(nil, a, false)
	p.observe(nil, b, false)
	p.observe(nil, daemonPod("unlabelled", "", true), false)
	check("one of two Ready", "d1", 2, false)

	aReady := daemonPod("a", "d1", true)
	p.observe(a, aReady, false)
	check("both Ready", "d1", 2, true)
	check("both Ready, three wanted", "d1", 3, false)
	check("another domain", "d2", 0, true)

	// A terminating pod is not counted Ready.
	aGoing := aReady.DeepCopy()
	aGoing.DeletionTimestamp = &metav1.Time{Time: time.Unix(1000, 0)}
	p.observe(aReady, aGoing, false)
	check("one terminating", "d1", 2, false)
	p.observe(nil, aGoing, true)
	check("the terminating one deleted", "d1", 1, true)
	check("the terminating one deleted, two wanted", "d1", 2, false)

	// A pod relabelled for another domain moves there.
	bMoved := daemonPod("b", "d2", false)
	p.observe(b, bMoved, false)
	check("moved away", "d1", 1, false)
	check("moved in, not Ready", "d2", 1, false)
	if _, ok := p.pods["d1"]; ok {
		t.Errorf("a domain without pods is still kept: %v", p.pods["d1"])
	}
	p.observe(bMoved, daemonPod("b", "", true), false)
	if len(p.pods) != 0 {
		t.Errorf("after the last labelled pod lost its label: %v kept, want nothing", p.pods)
	}
}

// TestPodEventsReachReadinessAndTheNextHandler: the pod handler records each event, a pod moved
// to another domain included, before handing it on.
func TestPodEventsReachReadinessAndTheNextHandler(t *testing.T) {
	p := newPodReadiness()
	var got []string
	var allReadyThen []bool
	next := handler.Funcs{
		CreateFunc: func(context.Context, event.CreateEvent, workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			got, allReadyThen = append(got, "create"), append(allReadyThen, p.allReady("d1", 1))
		},
		UpdateFunc: func(context.Context, event.UpdateEvent, workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			got, allReadyThen = append(got, "update"), append(allReadyThen, p.allReady("d1", 1))
		},
		DeleteFunc: func(context.Context, event.DeleteEvent, workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			got, allReadyThen = append(got, "delete"), append(allReadyThen, p.allReady("d1", 1))
		},
	}
	h := p.following(next)
	ctx := context.Background()
	notReady, ready, moved := daemonPod("a", "d1", false), daemonPod("a", "d1", true), daemonPod("a", "d2", true)
	h.Create(ctx, event.CreateEvent{Object: notReady}, nil)
	h.Update(ctx, event.UpdateEvent{ObjectOld: notReady, ObjectNew: ready}, nil)
	h.Update(ctx, event.UpdateEvent{ObjectOld: ready, ObjectNew: moved}, nil) // now another domain's
	h.Delete(ctx, event.DeleteEvent{Object: moved}, nil)
	want, wantReady := []string{"create", "update", "update", "delete"}, []bool{false, true, false, false}
	for i := range want {
		if i >= len(got) || got[i] != want[i] || allReadyThen[i] != wantReady[i] {
			t.Fatalf("events handed on %v with allReady %v, want %v with %v", got, allReadyThen, want, wantReady)
		}
	}
}
