package computedomain

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/metrics"
	"cdplane/internal/plane"
	"cdplane/internal/scheme"
)

// domainOwnedOnServer re-reads the domain from the apiserver before a write: the write goes
// ahead only when the object there is the same domain and belongs to this plane, whatever the
// cache said. A refusal is logged and counted, and no write of any kind follows.
//
// Only the metadata is read: a large domain's status (one entry per node) would cost the
// apiserver and the controller its serialization before every status write.
func (r *Reconciler) domainOwnedOnServer(ctx context.Context, cd *cdv1beta1.ComputeDomain) (bool, error) {
	fresh := scheme.Meta(cdv1beta1.GroupVersion.WithKind("ComputeDomain"))
	if err := r.reader.Get(ctx, client.ObjectKeyFromObject(cd), fresh); err != nil {
		return false, client.IgnoreNotFound(fmt.Errorf("re-reading ComputeDomain %s: %w", klog.KObj(cd), err))
	}
	if fresh.UID != cd.UID || !plane.Owns(r.opts.ControlPlaneID, fresh.Labels) {
		refuse(ctx, r.opts.ControlPlaneID, "ComputeDomain", klog.KObj(cd).String())
		return false, nil
	}
	return true, nil
}

// legacyNamespace is the legacy plane's check before it takes a domain (adds its finalizer): the
// domain's namespace, read fresh, must not be assigned to a named plane. Where no admission
// policy stamps the label (Kubernetes before 1.36), a domain created in a named plane's
// namespace is unlabelled until that plane's controller labels it (internal/controller/
// domainlabel), and the legacy plane, which selects unlabelled domains, must leave it alone.
// Named planes need no such check: their label is admitted only when it equals the namespace's.
func (r *Reconciler) legacyNamespace(ctx context.Context, cd *cdv1beta1.ComputeDomain) (bool, error) {
	if r.opts.ControlPlaneID != "" {
		return true, nil
	}
	ns := &corev1.Namespace{}
	if err := r.reader.Get(ctx, client.ObjectKey{Name: cd.Namespace}, ns); err != nil {
		return false, client.IgnoreNotFound(fmt.Errorf("reading namespace %s: %w", cd.Namespace, err))
	}
	if id, ok := ns.Labels[cdv1beta1.ControlPlaneLabel]; ok {
		ctrl.LoggerFrom(ctx).V(1).Info("Leaving an unlabelled ComputeDomain to the control plane its namespace is assigned to",
			"controlPlaneID", id)
		return false, nil
	}
	return true, nil
}

// ownedOnServer re-reads an object the controller is about to write or delete. It may be
// written when it was created by this plane's controller for the domain, or when it does not
// exist and absentOK (a create).
func (r *Reconciler) ownedOnServer(ctx context.Context, into client.Object, key client.ObjectKey, cdUID string, absentOK bool) (bool, error) {
	if err := r.reader.Get(ctx, key, into); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return absentOK, nil
		}
		return false, fmt.Errorf("re-reading %s: %w", key, err)
	}
	if !r.createdFor(into.GetLabels(), cdUID) {
		refuse(ctx, r.opts.ControlPlaneID, fmt.Sprintf("%T", into)[1:], key.String())
		return false, nil
	}
	return true, nil
}

// refuse records a write refused because the object belongs to someone else.
func refuse(ctx context.Context, planeID, kind, name string) {
	metrics.ForeignRefusals.WithLabelValues(planeID, kind).Inc()
	ctrl.LoggerFrom(ctx).Info("Refusing to write an object this control plane does not own", "kind", kind, "object", name)
}
