package computedomain

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/metrics"
	"cdplane/internal/plane"
)

// domainOwnedOnServer re-reads the domain from the apiserver before a write: the write goes
// ahead only when the object there is the same domain and belongs to this plane, whatever the
// cache said. A refusal is logged and counted, and no write of any kind follows.
func (r *Reconciler) domainOwnedOnServer(ctx context.Context, cd *cdv1beta1.ComputeDomain) (bool, error) {
	fresh := &cdv1beta1.ComputeDomain{}
	if err := r.reader.Get(ctx, client.ObjectKeyFromObject(cd), fresh); err != nil {
		return false, client.IgnoreNotFound(fmt.Errorf("re-reading ComputeDomain %s: %w", klog.KObj(cd), err))
	}
	if fresh.UID != cd.UID || !plane.Owns(r.opts.ControlPlaneID, fresh.Labels) {
		refuse(ctx, r.opts.ControlPlaneID, "ComputeDomain", klog.KObj(cd).String())
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
