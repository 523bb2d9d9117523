package secretmirror

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// Reconciler mirrors the Secrets of one control plane. A request names either a source Secret
// of the source namespace, whether or not it still exists, or, with an empty name, a namespace
// that may have left the plane (see the package documentation).
type Reconciler struct {
	opts Options
	// client reads from the cache (sources, target namespaces) and writes to the apiserver.
	client client.Client
	// reader reads from the apiserver: copies are read through it with namespaced requests,
	// and every write and delete starts from a fresh read.
	reader   client.Reader
	cache    cache.Cache
	recorder recorder.EventRecorder
	// log is for work outside a reconcile: event handlers and the start-up replay.
	log logr.Logger
}

// New returns a mirror for the options, defaulted and validated.
func New(opts Options) (*Reconciler, error) {
	opts.Defaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Reconciler{opts: opts}, nil
}

// Reconcile handles one request: a departed namespace (empty name) is swept; a source is
// mirrored.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if req.Name == "" {
		return ctrl.Result{}, r.sweep(ctx, req.Namespace)
	}
	if req.Namespace != r.opts.SourceNamespace {
		return ctrl.Result{}, nil
	}
	return r.mirror(ctx, req.Name)
}

// mirror brings the copies of one source up to date: the copy in each current target is read
// from the apiserver by name, and written where missing or stale, or deleted where the source
// is no longer wanted. A failure for one target does not stop the others; all failures are
// returned, so the source is retried with backoff. A source that is mirrored is looked at again
// after ResyncInterval, or after ForeignRecheckInterval when a foreign same-named Secret was
// reported.
func (r *Reconciler) mirror(ctx context.Context, name string) (ctrl.Result, error) {
	src, err := r.source(ctx, name)
	if err != nil {
		return ctrl.Result{}, err
	}
	nss := namespaceMetaList()
	if err := r.client.List(ctx, nss); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing target namespaces: %w", err)
	}
	targets := Targets(r.opts, nss.Items)
	copies, unread := r.copies(ctx, name, targets)
	var errs []error
	for _, ns := range sets.List(sets.KeySet(unread)) {
		targets.Delete(ns)
		errs = append(errs, fmt.Errorf("reading the copy of %s/%s in namespace %s: %w", r.opts.SourceNamespace, name, ns, unread[ns]))
	}
	p := MakePlan(r.opts, src, targets, copies)
	ctrl.LoggerFrom(ctx).V(2).Info("Mirroring", "write", p.Write, "delete", p.Delete)

	foreign := false
	for _, ns := range p.Write {
		out, err := r.writeTarget(ctx, src, ns)
		if err != nil {
			errs = append(errs, fmt.Errorf("mirroring Secret %s into namespace %s: %w", klog.KObj(src), ns, err))
			continue
		}
		foreign = foreign || out == outcomeForeign
	}
	for _, ns := range p.Delete {
		if err := r.deleteCopy(ctx, types.NamespacedName{Namespace: ns, Name: name}); err != nil {
			errs = append(errs, fmt.Errorf("deleting the copy of %s/%s in namespace %s: %w", r.opts.SourceNamespace, name, ns, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: NextCheck(r.opts, src != nil, foreign)}, nil
}

// source returns the cached source Secret, or nil when it is gone or no longer wanted (the
// cache holds only the Secrets of the source namespace that match the selector).
func (r *Reconciler) source(ctx context.Context, name string) (*corev1.Secret, error) {
	src := &corev1.Secret{}
	err := r.client.Get(ctx, types.NamespacedName{Namespace: r.opts.SourceNamespace, Name: name}, src)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading source Secret %s/%s: %w", r.opts.SourceNamespace, name, err)
	}
	if !Wanted(r.opts, src) {
		return nil, nil
	}
	return src, nil
}

// copies reads the Secret named name in each target with a namespaced GET and returns those
// that are the plane's copies, and the targets where the read failed, with their errors.
func (r *Reconciler) copies(ctx context.Context, name string, targets sets.Set[string]) ([]*corev1.Secret, map[string]error) {
	var out []*corev1.Secret
	unread := map[string]error{}
	for _, ns := range sets.List(targets) {
		s := &corev1.Secret{}
		err := r.reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			unread[ns] = err
		case OwnsCopy(r.opts.ControlPlaneID, r.opts.SourceNamespace, s.Labels):
			out = append(out, s)
		}
	}
	return out, unread
}

// sweep removes the plane's copies from namespace ns, which may have left the plane. A fresh
// read of the namespace decides: gone or terminating, its Secrets go with it; a target (again),
// its copies stay. Otherwise the copies are listed in ns (a namespaced, marker-selected list)
// and each is deleted after a fresh read and ownership check. Forbidden, listing or deleting, is
// logged and not retried: the plane's rights in ns may already be gone, and `cdplane unassign`
// removes the copies itself before it removes them. Other failures are returned and retried.
func (r *Reconciler) sweep(ctx context.Context, ns string) error {
	if ns == r.opts.SourceNamespace {
		return nil
	}
	log := ctrl.LoggerFrom(ctx).WithValues("namespace", ns)
	cur := namespaceMeta()
	if err := r.reader.Get(ctx, types.NamespacedName{Name: ns}, cur); apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("reading namespace %s: %w", ns, err)
	}
	if OwnsNamespace(r.opts, cur) || cur.DeletionTimestamp != nil {
		log.V(2).Info("Namespace is a target or terminating: no copies to sweep")
		return nil
	}
	list := secretMetaList()
	err := r.reader.List(ctx, list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: CopySelector(r.opts)})
	if apierrors.IsForbidden(err) {
		log.V(1).Info("Cannot list the copies in a namespace that left the control plane; leaving them", "err", err.Error())
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing the copies in namespace %s: %w", ns, err)
	}
	var errs []error
	for i := range list.Items {
		key := types.NamespacedName{Namespace: ns, Name: list.Items[i].Name}
		err := r.deleteCopy(ctx, key)
		switch {
		case apierrors.IsForbidden(err):
			log.V(1).Info("Cannot delete a copy in a namespace that left the control plane; leaving it", "copy", klog.KRef(ns, key.Name), "err", err.Error())
		case err != nil:
			errs = append(errs, fmt.Errorf("deleting the copy %s in namespace %s, which left the control plane: %w", key.Name, ns, err))
		}
	}
	return errors.Join(errs...)
}
