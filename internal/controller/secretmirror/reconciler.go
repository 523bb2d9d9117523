package secretmirror

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// copyIndex indexes the plane's cached copies by name, which is their source's name.
const copyIndex = "cdplane.secretmirror/copy-of"

// Reconciler mirrors one source Secret per request: the request names a Secret of the source
// namespace, whether or not it still exists.
type Reconciler struct {
	opts Options
	// client reads from the cache and writes to the apiserver.
	client client.Client
	// reader reads from the apiserver: every write and delete starts from a fresh read.
	reader   client.Reader
	cache    cache.Cache
	recorder recorder.EventRecorder
}

// New returns a mirror for the options, defaulted and validated.
func New(opts Options) (*Reconciler, error) {
	opts.Defaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Reconciler{opts: opts}, nil
}

// Reconcile brings the copies of one source up to date: written into every target whose cached
// copy is missing or stale, deleted where the source or the namespace is no longer wanted. A
// failure for one target does not stop the others; all failures are returned, so the source is
// retried with backoff. A foreign same-named Secret is reported and looked at again later.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if req.Namespace != r.opts.SourceNamespace {
		return ctrl.Result{}, nil
	}
	src, err := r.source(ctx, req.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	nss := namespaceMetaList()
	if err := r.client.List(ctx, nss); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing target namespaces: %w", err)
	}
	copies, err := r.copies(ctx, req.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	p := MakePlan(r.opts, src, Targets(r.opts, nss.Items), copies)
	ctrl.LoggerFrom(ctx).V(2).Info("Mirroring", "write", p.Write, "delete", p.Delete)

	var errs []error
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
		if err := r.deleteCopy(ctx, types.NamespacedName{Namespace: ns, Name: req.Name}); err != nil {
			errs = append(errs, fmt.Errorf("deleting the copy of %s in namespace %s: %w", req.NamespacedName, ns, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return ctrl.Result{}, err
	}
	if foreign {
		return ctrl.Result{RequeueAfter: r.opts.ForeignRecheckInterval}, nil
	}
	return ctrl.Result{}, nil
}

// source returns the cached source Secret, or nil when it is gone (the cache holds only the
// Secrets of the source namespace that match the selector).
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

// copies returns the plane's cached copies named name.
func (r *Reconciler) copies(ctx context.Context, name string) ([]*corev1.Secret, error) {
	list := &corev1.SecretList{}
	if err := r.client.List(ctx, list, client.MatchingFields{copyIndex: name}); err != nil {
		return nil, fmt.Errorf("listing copies of %s: %w", name, err)
	}
	out := make([]*corev1.Secret, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

// indexCopy indexes a cached Secret by name when it is one of the plane's copies.
func (r *Reconciler) indexCopy(o client.Object) []string {
	if o.GetNamespace() == r.opts.SourceNamespace || !OwnsCopy(r.opts.ControlPlaneID, r.opts.SourceNamespace, o.GetLabels()) {
		return nil
	}
	return []string{o.GetName()}
}
