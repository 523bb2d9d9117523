package computedomain

import (
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/scheme"
)

// UIDIndex indexes ComputeDomains by UID, to map objects labelled with a domain's UID back to it.
const UIDIndex = "metadata.uid"

// passTimeout bounds a pass. A pass's reads wait for the cache to show the controller's own
// writes (NewClient); should a watch never deliver one (it relisted past an object deleted
// meanwhile, and no later event of that kind comes), the pass ends with an error and is retried
// with the controller's backoff, instead of holding a worker for good. The longest passes (a
// burst of joins in the largest domains) take seconds.
const passTimeout = 2 * time.Minute

// SetupWithManager registers the reconciler and its watches. Events for one domain are delayed
// by the batch window, so that a burst of them becomes one reconcile.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts controller.Options) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &cdv1beta1.ComputeDomain{}, UIDIndex, func(o client.Object) []string {
		return []string{string(o.GetUID())}
	}); err != nil {
		return err
	}
	byLabel := r.labelHandler(mgr.GetCache())
	// The daemon pods' readiness, for passes that come while their domain rests (see pacer).
	ready := newPodReadiness()
	pods := ready.following(byLabel)
	if r.hostManaged() {
		pods = r.pluginPodHandler(mgr.GetCache(), byLabel)
	}
	// A pass that comes while its domain rests is put back in the queue for the rest's end.
	r.pacer = newPacer(ready)
	if opts.ReconciliationTimeout == 0 {
		opts.ReconciliationTimeout = passTimeout
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("computedomain").
		For(&cdv1beta1.ComputeDomain{}).
		Watches(&corev1.Pod{}, pods).
		Watches(&cdv1beta1.ComputeDomainClique{}, byLabel).
		Watches(&appsv1.DaemonSet{}, byLabel).
		Watches(&resourcev1.ResourceClaimTemplate{}, byLabel).
		Watches(&resourcev1.ResourceClaim{}, byLabel).
		WatchesMetadata(&corev1.Node{}, byLabel).
		WithOptions(opts).
		Complete(r)
}

// labelHandler maps an object carrying a domain's UID label to that domain, after the batch
// window. Updates map both the old and the new object, so that losing the label is seen.
func (r *Reconciler) labelHandler(c client.Reader) handler.EventHandler {
	enqueue := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], objs ...client.Object) {
		seen := map[string]bool{}
		for _, o := range objs {
			uid := o.GetLabels()[cdv1beta1.ComputeDomainLabel]
			if uid == "" || seen[uid] {
				continue
			}
			seen[uid] = true
			// Only the domain's name is read: no copy of it (its status holds up to 4,096
			// entries, and every daemon pod's every update comes through here).
			list := &cdv1beta1.ComputeDomainList{}
			if err := c.List(ctx, list, client.MatchingFields{UIDIndex: uid}, client.UnsafeDisableDeepCopy); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "Mapping an object to its ComputeDomain", "uid", uid)
				continue
			}
			for _, cd := range list.Items {
				q.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: cd.Namespace, Name: cd.Name}}, r.opts.BatchWindow)
			}
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
	}
}

// pluginPodHandler maps a kubelet-plugin pod (host-managed IMEX: its readiness is its node's
// host-IMEX readiness) to the domain its node is labelled for, through byLabel applied to the
// node's cached metadata.
func (r *Reconciler) pluginPodHandler(c client.Reader, byLabel handler.EventHandler) handler.EventHandler {
	nodeOf := func(ctx context.Context, o client.Object) client.Object {
		p, ok := o.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return nil
		}
		n := scheme.Meta(corev1.SchemeGroupVersion.WithKind("Node"))
		if err := c.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, n); err != nil {
			return nil // not labelled for a domain of this plane: not in the cache
		}
		return n
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if n := nodeOf(ctx, e.Object); n != nil {
				byLabel.Create(ctx, event.CreateEvent{Object: n}, q)
			}
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if n := nodeOf(ctx, e.ObjectNew); n != nil {
				byLabel.Create(ctx, event.CreateEvent{Object: n}, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if n := nodeOf(ctx, e.Object); n != nil {
				byLabel.Create(ctx, event.CreateEvent{Object: n}, q)
			}
		},
	}
}
