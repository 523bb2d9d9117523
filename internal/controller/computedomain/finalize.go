package computedomain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/plane"
	"cdplane/internal/scheme"
)

// finalize runs the deletion sequence: claim templates and DaemonSet, cliques, node labels, and
// last the finalizer. Each step only touches objects created for this domain.
func (r *Reconciler) finalize(ctx context.Context, cd *cdv1beta1.ComputeDomain) (ctrl.Result, error) {
	r.opts.Events.Forget(cd.UID)
	if !controllerutil.ContainsFinalizer(cd, cdv1beta1.Finalizer) {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx)
	uid := string(cd.UID)
	// A domain deleted before cdplane ever reconciled it still had the previous controller's
	// objects: they go too, so that nothing of it is left behind.
	if _, err := r.takeOver(ctx, cd); err != nil {
		return ctrl.Result{}, err
	}
	// The channel template lives in the domain's namespace. If the plane lost its rights there
	// (a forced unassign, the namespace being deleted and its RoleBindings with it), leave the
	// template to the garbage collector (the domain owns it) rather than never finalizing.
	wl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: cd.Namespace, Name: cd.Spec.Channel.ResourceClaimTemplate.Name}}
	if err := r.deleteOwned(ctx, wl, uid); apierrors.IsForbidden(err) {
		log.Info("No right to delete the domain's claim template; the garbage collector removes it with the domain",
			"resourceClaimTemplate", klog.KObj(wl), "err", err.Error())
	} else if err != nil {
		return ctrl.Result{}, err
	}
	for _, obj := range []client.Object{
		&resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: r.opts.DriverNamespace, Name: cdv1beta1.DaemonSetName(uid)}},
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: r.opts.DriverNamespace, Name: cdv1beta1.DaemonSetName(uid)}},
	} {
		if err := r.deleteOwned(ctx, obj, uid); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.deleteCliques(ctx, cd, nil, nil); err != nil {
		return ctrl.Result{}, err
	}
	if err := RemoveNodeLabels(ctx, r.client, r.reader, r.opts.ControlPlaneID, uid); err != nil {
		return ctrl.Result{}, err
	}
	if ok, err := r.domainOwnedOnServer(ctx, cd); !ok || err != nil {
		return ctrl.Result{}, err
	}
	orig := cd.DeepCopy()
	controllerutil.RemoveFinalizer(cd, cdv1beta1.Finalizer)
	if err := r.client.Patch(ctx, cd, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("removing finalizer: %w", err))
	}
	log.V(1).Info("Removed finalizer")
	return ctrl.Result{}, nil
}

// deleteOwned deletes obj if it exists and was created for the domain with this UID.
func (r *Reconciler) deleteOwned(ctx context.Context, obj client.Object, uid string) error {
	if err := r.client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !r.createdFor(obj.GetLabels(), uid) {
		return nil
	}
	if ok, err := r.ownedOnServer(ctx, obj.DeepCopyObject().(client.Object), client.ObjectKeyFromObject(obj), uid, false); !ok || err != nil {
		return err
	}
	objUID := obj.GetUID()
	err := r.client.Delete(ctx, obj, client.Preconditions{UID: &objUID}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Deleted object", "object", klog.KObj(obj))
	return nil
}

// RemoveNodeLabels removes the domain's label from every node of the plane that carries it with
// this UID. Each node's plane is re-checked on a fresh read, and each removal is a JSON patch
// that first tests the value, so a node relabelled for another domain is left alone.
func RemoveNodeLabels(ctx context.Context, c client.Client, reader client.Reader, planeID, uid string) error {
	nodes := scheme.MetaList(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := c.List(ctx, nodes, client.MatchingLabels{cdv1beta1.ComputeDomainLabel: uid}); err != nil {
		return fmt.Errorf("listing labelled nodes: %w", err)
	}
	for i := range nodes.Items {
		if err := RemoveNodeLabel(ctx, c, reader, planeID, nodes.Items[i].Name, uid); err != nil {
			return err
		}
	}
	return nil
}

// RemoveNodeLabel removes the domain label from one node if it still has value uid and, on a
// fresh read, belongs to the plane.
func RemoveNodeLabel(ctx context.Context, c client.Client, reader client.Reader, planeID, node, uid string) error {
	fresh := scheme.Meta(corev1.SchemeGroupVersion.WithKind("Node"))
	if err := reader.Get(ctx, client.ObjectKey{Name: node}, fresh); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !plane.Owns(planeID, fresh.Labels) {
		refuse(ctx, planeID, "Node", node)
		return nil
	}
	path := "/metadata/labels/" + strings.ReplaceAll(strings.ReplaceAll(cdv1beta1.ComputeDomainLabel, "~", "~0"), "/", "~1")
	patch, _ := json.Marshal([]map[string]any{
		{"op": "test", "path": path, "value": uid},
		{"op": "remove", "path": path},
	})
	n := scheme.Meta(corev1.SchemeGroupVersion.WithKind("Node"))
	n.Name = node
	err := c.Patch(ctx, n, client.RawPatch(types.JSONPatchType, patch))
	switch {
	case err == nil:
		ctrl.LoggerFrom(ctx).V(1).Info("Removed node label", "node", node, "computeDomain", uid)
		return nil
	case apierrors.IsNotFound(err), isUnprocessable(err):
		return nil // gone, or no longer labelled for this domain
	default:
		return fmt.Errorf("removing label from node %s: %w", node, err)
	}
}

// isUnprocessable reports a patch the server could not apply: here, a failed test operation.
func isUnprocessable(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status) && status.Status().Code == http.StatusUnprocessableEntity
}
