package secretmirror

import (
	"context"
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// queue is the controller's workqueue as event handlers and sources see it.
type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// replayRetry spaces the start-up replay's lists of the namespaces whose copies could not be
// listed: 1s doubling up to 1m, until the controller stops.
func replayRetry() wait.Backoff {
	return wait.Backoff{Duration: time.Second, Factor: 2, Cap: time.Minute, Steps: math.MaxInt32}
}

// SetupWithManager registers the mirror with the manager, whose cache must be scoped with
// CacheByObject. Watches: the sources (the cache holds no other Secret), the target namespaces
// (one joining, or changing labels, requeues every source; one leaving is swept), and a
// start-up replay once the caches have synced. Copies are not watched: the periodic resync of
// every source heals them. Controller options (SkipNameValidation, workers) come from the
// manager's controller configuration.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.client = mgr.GetClient()
	r.reader = mgr.GetAPIReader()
	r.cache = mgr.GetCache()
	r.recorder = mgr.GetEventRecorder(ControllerName)
	r.log = mgr.GetLogger().WithValues("controller", ControllerName)
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.mapSource)).
		WatchesMetadata(&corev1.Namespace{}, r.namespaceHandler()).
		WatchesRawSource(source.Func(r.replay)).
		Complete(r)
}

// mapSource maps a source to itself.
func (r *Reconciler) mapSource(_ context.Context, o client.Object) []reconcile.Request {
	if o.GetNamespace() != r.opts.SourceNamespace {
		return nil
	}
	return []reconcile.Request{r.request(o.GetName())}
}

// namespaceHandler turns events of the label-scoped namespace cache into requests: every source
// for a namespace that joined the plane, a sweep for one that may have left it.
func (r *Reconciler) namespaceHandler() handler.EventHandler {
	on := func(ctx context.Context, q queue, name string, change NamespaceChange) {
		switch change {
		case NamespaceJoined:
			reqs, err := r.sourceRequests(ctx)
			if err != nil {
				r.log.Error(err, "Mapping a namespace to the Secrets to mirror", "namespace", name)
			}
			for _, req := range reqs {
				q.Add(req)
			}
		case NamespaceLeft:
			r.log.V(1).Info("Namespace may have left the control plane; sweeping its copies", "namespace", name)
			q.Add(sweepRequest(name))
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q queue) {
			on(ctx, q, e.Object.GetName(), ClassifyNamespaceEvent(r.opts, nil, e.Object))
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q queue) {
			on(ctx, q, e.ObjectNew.GetName(), ClassifyNamespaceEvent(r.opts, e.ObjectOld, e.ObjectNew))
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q queue) {
			on(ctx, q, e.Object.GetName(), ClassifyNamespaceEvent(r.opts, e.Object, nil))
		},
	}
}

// replay enqueues, once the caches have synced, every cached source and, for every current
// target, the name of each of the plane's copies a namespaced list finds there, so a cold start
// converges without waiting for a resync, copies whose source was deleted while the controller
// was down included. A target where listing is forbidden is skipped (logged at V(1)); one where
// listing fails otherwise is listed again with backoff. It runs when the controller starts (on
// the leader).
func (r *Reconciler) replay(ctx context.Context, q queue) error {
	go func() {
		if !r.cache.WaitForCacheSync(ctx) {
			return
		}
		// Cached lists block until their informers have synced.
		reqs, err := r.sourceRequests(ctx)
		if err != nil {
			r.log.Error(err, "Replaying the Secrets to mirror")
			return
		}
		for _, req := range reqs {
			q.Add(req)
		}
		nss := namespaceMetaList()
		if err := r.client.List(ctx, nss); err != nil {
			r.log.Error(err, "Listing target namespaces to replay their copies")
			return
		}
		pending := sets.List(Targets(r.opts, nss.Items))
		r.log.V(1).Info("Replayed sources", "requests", len(reqs), "targets", len(pending))
		retry := replayRetry()
		for {
			if pending = r.replayCopies(ctx, q, pending); len(pending) == 0 {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(retry.Step()):
			}
		}
	}()
	return nil
}

// replayCopies enqueues the source name of every copy in namespaces nss and returns the
// namespaces whose copies could not be listed and should be tried again.
func (r *Reconciler) replayCopies(ctx context.Context, q queue, nss []string) []string {
	var failed []string
	for _, ns := range nss {
		list := secretMetaList()
		err := r.reader.List(ctx, list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: CopySelector(r.opts)})
		switch {
		case apierrors.IsForbidden(err):
			r.log.V(1).Info("Cannot list the copies in a target namespace; not replaying them", "namespace", ns, "err", err.Error())
		case err != nil:
			r.log.Error(err, "Listing the copies in a target namespace; will retry", "namespace", ns)
			failed = append(failed, ns)
		default:
			for i := range list.Items {
				q.Add(r.request(list.Items[i].Name))
			}
			r.log.V(2).Info("Replayed copies", "namespace", ns, "copies", len(list.Items))
		}
	}
	return failed
}

// sourceRequests returns a request per cached source.
func (r *Reconciler) sourceRequests(ctx context.Context) ([]reconcile.Request, error) {
	sources := &corev1.SecretList{}
	if err := r.client.List(ctx, sources, client.InNamespace(r.opts.SourceNamespace)); err != nil {
		return nil, fmt.Errorf("listing sources: %w", err)
	}
	reqs := make([]reconcile.Request, 0, len(sources.Items))
	for i := range sources.Items {
		reqs = append(reqs, r.request(sources.Items[i].Name))
	}
	return reqs, nil
}

func (r *Reconciler) request(name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: r.opts.SourceNamespace, Name: name}}
}

// sweepRequest asks for the plane's copies in namespace ns to be removed if it is no longer a
// target. Its name is empty, which no Secret's is.
func sweepRequest(ns string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns}}
}
