package secretmirror

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// SetupWithManager registers the mirror with the manager, whose cache must be scoped with
// CacheByObject. Watches: Secrets (sources and the plane's copies, both mapped to the source),
// namespaces (a namespace joining or leaving the plane requeues every source), and a start-up
// replay of every source and every copy once the caches have synced. Controller options
// (SkipNameValidation, workers) come from the manager's controller configuration.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.client = mgr.GetClient()
	r.reader = mgr.GetAPIReader()
	r.cache = mgr.GetCache()
	r.recorder = mgr.GetEventRecorder(ControllerName)
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Secret{}, copyIndex, r.indexCopy); err != nil {
		return fmt.Errorf("indexing mirrored Secrets: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.mapSecret)).
		WatchesMetadata(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.mapNamespace),
			builder.WithPredicates(membershipChanged())).
		WatchesRawSource(source.Func(r.replay)).
		Complete(r)
}

// mapSecret maps a source to itself and a copy to its source (same name).
func (r *Reconciler) mapSecret(_ context.Context, o client.Object) []reconcile.Request {
	if o.GetNamespace() != r.opts.SourceNamespace && !OwnsCopy(r.opts.ControlPlaneID, r.opts.SourceNamespace, o.GetLabels()) {
		return nil
	}
	return []reconcile.Request{r.request(o.GetName())}
}

// mapNamespace maps a namespace joining or leaving the plane to every source, and to the
// sources of the copies it holds (whose sources may be gone).
func (r *Reconciler) mapNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	reqs, err := r.requests(ctx, client.InNamespace(o.GetName()))
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Mapping a namespace to the Secrets to mirror", "namespace", o.GetName())
	}
	return reqs
}

// replay enqueues every source and the source of every copy once the caches have synced, so a
// cold start converges without waiting for a resync, copies whose source was deleted while the
// controller was down included. It runs when the controller starts (on the leader).
func (r *Reconciler) replay(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	go func() {
		if !r.cache.WaitForCacheSync(ctx) {
			return
		}
		// Cached lists block until their informers have synced.
		reqs, err := r.requests(ctx)
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Replaying the Secrets to mirror")
			return
		}
		for _, req := range reqs {
			q.Add(req)
		}
		ctrl.LoggerFrom(ctx).WithName(ControllerName).V(1).Info("Replayed sources", "requests", len(reqs))
	}()
	return nil
}

// requests returns a request per cached source and per cached copy, copies limited by opts.
func (r *Reconciler) requests(ctx context.Context, copyOpts ...client.ListOption) ([]reconcile.Request, error) {
	sources := &corev1.SecretList{}
	if err := r.client.List(ctx, sources, client.InNamespace(r.opts.SourceNamespace)); err != nil {
		return nil, fmt.Errorf("listing sources: %w", err)
	}
	copies := &corev1.SecretList{}
	if err := r.client.List(ctx, copies, append(copyOpts, client.MatchingLabelsSelector{Selector: CopySelector(r.opts)})...); err != nil {
		return nil, fmt.Errorf("listing copies: %w", err)
	}
	seen := map[string]bool{}
	var reqs []reconcile.Request
	for _, list := range [][]corev1.Secret{sources.Items, copies.Items} {
		for i := range list {
			if name := list[i].Name; !seen[name] {
				seen[name] = true
				reqs = append(reqs, r.request(name))
			}
		}
	}
	return reqs, nil
}

func (r *Reconciler) request(name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: r.opts.SourceNamespace, Name: name}}
}

// membershipChanged passes namespace updates that can change whether it is a target: its
// labels or its deletion. Creations and deletions (including leaving the label-scoped cache)
// always pass.
func membershipChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return !equality.Semantic.DeepEqual(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()) ||
			!equality.Semantic.DeepEqual(e.ObjectOld.GetDeletionTimestamp(), e.ObjectNew.GetDeletionTimestamp())
	}}
}
