package computedomain

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/kubectl/pkg/util/podutils"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cdv1beta1 "cdplane/api/v1beta1"
)

// podReadiness follows, per domain (by UID), the daemon pods the controller's cache shows
// carrying the domain's label and whether each is Ready. It is kept by the pod event handler at
// a map update an event, so that a pass coming while its domain rests can tell, without
// computing membership, whether the domain may have turned Ready since its last
// pass (see pacer). It is a hint: the pass computes the truth.
type podReadiness struct {
	mu sync.Mutex
	// pods holds, per domain UID, each labelled pod's readiness (a terminating pod counts as not
	// Ready: its node's entry is about to change).
	pods map[string]map[types.UID]bool
}

func newPodReadiness() *podReadiness {
	return &podReadiness{pods: map[string]map[types.UID]bool{}}
}

// observe records o as the cache now shows it, and forgets old (the same pod before the event, or
// nil); a pod whose domain label changed moves. deleted forgets o.
func (p *podReadiness) observe(old, o client.Object, deleted bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old != nil {
		p.forget(old)
	}
	if deleted {
		p.forget(o)
		return
	}
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	uid := pod.Labels[cdv1beta1.ComputeDomainLabel]
	if uid == "" {
		p.forget(o)
		return
	}
	byPod := p.pods[uid]
	if byPod == nil {
		byPod = map[types.UID]bool{}
		p.pods[uid] = byPod
	}
	byPod[pod.UID] = pod.DeletionTimestamp == nil && podutils.IsPodReady(pod)
}

// forget drops o from its domain's pods (the caller holds p.mu).
func (p *podReadiness) forget(o client.Object) {
	uid := o.GetLabels()[cdv1beta1.ComputeDomainLabel]
	byPod := p.pods[uid]
	if byPod == nil {
		return
	}
	delete(byPod, o.GetUID())
	if len(byPod) == 0 {
		delete(p.pods, uid)
	}
}

// allReady reports whether the domain uid has at least numNodes labelled pods and all of them
// are Ready: what a Ready domain looks like from its pods (with numNodes 0, also none). False on
// a nil p.
func (p *podReadiness) allReady(uid string, numNodes int) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	byPod := p.pods[uid]
	if len(byPod) < numNodes {
		return false
	}
	for _, ready := range byPod {
		if !ready {
			return false
		}
	}
	return true
}

// following has p observe every pod event before next maps it to its domain.
func (p *podReadiness) following(next handler.EventHandler) handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			p.observe(nil, e.Object, false)
			next.Create(ctx, e, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			p.observe(e.ObjectOld, e.ObjectNew, false)
			next.Update(ctx, e, q)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			p.observe(nil, e.Object, true)
			next.Delete(ctx, e, q)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			next.Generic(ctx, e, q)
		},
	}
}
