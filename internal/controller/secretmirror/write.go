package secretmirror

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"cdplane/internal/metrics"
)

// outcome is what one write of a copy did.
type outcome int

const (
	outcomeUnchanged outcome = iota
	outcomeCreated
	outcomeUpdated
	outcomeReplaced
	// outcomeForeign: a same-named Secret the plane does not own is there; it was not touched.
	outcomeForeign
	// outcomeNotTarget: a fresh read says the namespace is no longer the plane's.
	outcomeNotTarget
)

func (o outcome) String() string {
	return [...]string{"unchanged", "created", "updated", "replaced", "foreign", "not a target"}[o]
}

// retriable says which errors the write and delete loops retry from a fresh read: conflicts on
// update, delete preconditions, and a create that lost a race.
func retriable(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
}

// writeTarget makes the copy of src in namespace ns equal to the desired one. Each attempt reads
// the namespace and the target from the apiserver, re-checks that both are the plane's, and
// writes with the target's resourceVersion; a conflict starts a new attempt.
func (r *Reconciler) writeTarget(ctx context.Context, src *corev1.Secret, ns string) (outcome, error) {
	desired := DesiredCopy(r.opts, src, ns)
	var out outcome
	err := retry.OnError(retry.DefaultRetry, retriable, func() error {
		var err error
		out, err = r.writeOnce(ctx, desired)
		if retriable(err) {
			metrics.SecretMirrorWriteConflicts.WithLabelValues(r.opts.ControlPlaneID, r.opts.SourceNamespace).Inc()
		}
		return err
	})
	if err != nil {
		return out, err
	}
	log := ctrl.LoggerFrom(ctx)
	switch out {
	case outcomeForeign:
		r.reportForeign(ctx, src, types.NamespacedName{Namespace: ns, Name: src.Name}, "overwrite")
		r.recorder.Eventf(src, nil, corev1.EventTypeWarning, ReasonForeignTarget, "Mirror",
			"Secret %s/%s exists and is not a copy made by this control plane; it is left untouched", ns, src.Name)
	case outcomeCreated, outcomeUpdated, outcomeReplaced:
		log.V(1).Info("Mirrored Secret", "source", klog.KObj(src), "copy", klog.KObj(desired), "action", out.String())
	case outcomeNotTarget:
		log.V(1).Info("Namespace is no longer a target", "source", klog.KObj(src), "namespace", ns)
	}
	return out, nil
}

func (r *Reconciler) writeOnce(ctx context.Context, desired *corev1.Secret) (outcome, error) {
	ns := namespaceMeta()
	if err := r.reader.Get(ctx, types.NamespacedName{Name: desired.Namespace}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			return outcomeNotTarget, nil
		}
		return 0, fmt.Errorf("reading namespace: %w", err)
	}
	if !OwnsNamespace(r.opts, ns) {
		return outcomeNotTarget, nil
	}
	cur := &corev1.Secret{}
	err := r.reader.Get(ctx, client.ObjectKeyFromObject(desired), cur)
	switch {
	case apierrors.IsNotFound(err):
		return outcomeCreated, r.create(ctx, desired)
	case err != nil:
		return 0, fmt.Errorf("reading the target: %w", err)
	case !OwnsCopy(r.opts.ControlPlaneID, r.opts.SourceNamespace, cur.Labels):
		return outcomeForeign, nil
	case UpToDate(cur, desired):
		return outcomeUnchanged, nil
	case NeedsReplace(cur, desired):
		// The type, or the data of an immutable Secret, cannot change: delete exactly the
		// version read (preconditions) and create the copy afresh. Losing either race is a
		// conflict, retried from a fresh read.
		uid, rv := cur.UID, cur.ResourceVersion
		if err := r.client.Delete(ctx, cur, client.Preconditions{UID: &uid, ResourceVersion: &rv}); err != nil && !apierrors.IsNotFound(err) {
			return 0, err
		}
		return outcomeReplaced, r.create(ctx, desired)
	default:
		// cur carries its resourceVersion: a concurrent change fails with a conflict.
		return outcomeUpdated, r.client.Update(ctx, ApplyTo(cur, desired), client.FieldOwner(r.opts.FieldManager))
	}
}

func (r *Reconciler) create(ctx context.Context, desired *corev1.Secret) error {
	return r.client.Create(ctx, desired.DeepCopy(), client.FieldOwner(r.opts.FieldManager))
}

// deleteCopy deletes the plane's copy key after a fresh read shows it still carries the plane's
// marker, with the version read as a precondition. A Secret without the marker is left alone:
// whatever an earlier read or list said, it is not the plane's.
func (r *Reconciler) deleteCopy(ctx context.Context, key types.NamespacedName) error {
	return retry.OnError(retry.DefaultRetry, retriable, func() error {
		cur := &corev1.Secret{}
		if err := r.reader.Get(ctx, key, cur); err != nil {
			return client.IgnoreNotFound(err)
		}
		if !OwnsCopy(r.opts.ControlPlaneID, r.opts.SourceNamespace, cur.Labels) {
			r.reportForeign(ctx, nil, key, "delete")
			return nil
		}
		uid, rv := cur.UID, cur.ResourceVersion
		err := r.client.Delete(ctx, cur, client.Preconditions{UID: &uid, ResourceVersion: &rv})
		if retriable(err) {
			metrics.SecretMirrorWriteConflicts.WithLabelValues(r.opts.ControlPlaneID, r.opts.SourceNamespace).Inc()
			return err
		}
		if err != nil {
			return client.IgnoreNotFound(err)
		}
		ctrl.LoggerFrom(ctx).V(1).Info("Deleted mirrored Secret", "copy", klog.KRef(key.Namespace, key.Name))
		return nil
	})
}

// reportForeign logs a refusal to touch a Secret the plane does not own and counts it, in the
// mirror's counter and in the plane-wide refusal counter.
func (r *Reconciler) reportForeign(ctx context.Context, src *corev1.Secret, target types.NamespacedName, action string) {
	metrics.SecretMirrorForeignTargets.WithLabelValues(r.opts.ControlPlaneID, r.opts.SourceNamespace).Inc()
	metrics.ForeignRefusals.WithLabelValues(r.opts.ControlPlaneID, "Secret").Inc()
	kv := []any{"secret", klog.KRef(target.Namespace, target.Name), "refused", action}
	if src != nil {
		kv = append(kv, "source", klog.KObj(src))
	}
	ctrl.LoggerFrom(ctx).Info("Refusing to touch a Secret this control plane does not own", kv...)
}
