package computedomain

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
)

// previousObject is one object the previous controller (NVIDIA's) or its daemons created for a
// domain: what takeOver removes.
type previousObject struct {
	obj  client.Object
	kind string
}

// takeOver removes, once per domain and run, what NVIDIA's controller and daemons left for the
// domain when cdplane took over from them (Options.TakeOverFrom): in their driver namespace the
// domain's daemon DaemonSet (its daemons go with it), daemon claim template and cliques, and in
// the domain's namespace the channel claim template they created (labelled for the domain, not
// managed by cdplane). Each carries the domain finalizer, which no one else would remove: it is
// removed, then the object deleted. Running pods keep their allocated claims. It reports whether
// it deleted anything (the caller looks again soon: cdplane's own objects take their place).
func (r *Reconciler) takeOver(ctx context.Context, cd *cdv1beta1.ComputeDomain) (bool, error) {
	if r.opts.TakeOverFrom == "" {
		return false, nil
	}
	if _, done := r.tookOver.Load(cd.UID); done {
		return false, nil
	}
	reset, err := r.resetForeignStatus(ctx, cd)
	if err != nil {
		return false, err
	}
	found, err := r.previousObjects(ctx, cd)
	if err != nil {
		return false, err
	}
	if len(found) == 0 {
		r.tookOver.Store(cd.UID, struct{}{})
		return reset, nil
	}
	names := make([]string, 0, len(found))
	for _, p := range found {
		if err := r.removePrevious(ctx, p.obj); err != nil {
			return false, fmt.Errorf("taking over ComputeDomain %s: %s %s: %w", klog.KObj(cd), p.kind, klog.KObj(p.obj), err)
		}
		names = append(names, p.kind+" "+klog.KObj(p.obj).String())
	}
	ctrl.LoggerFrom(ctx).Info("Took over the ComputeDomain from the previous controller: deleted what it had created",
		"deleted", names)
	return true, nil
}

// previousObjects lists what the previous controller left for cd, read from the apiserver (the
// cache holds only cdplane's objects).
func (r *Reconciler) previousObjects(ctx context.Context, cd *cdv1beta1.ComputeDomain) ([]previousObject, error) {
	uid := string(cd.UID)
	forDomain := client.MatchingLabels{cdv1beta1.ComputeDomainLabel: uid}
	var out []previousObject
	previous := func(labels map[string]string) bool {
		return labels[cdv1beta1.ComputeDomainLabel] == uid && labels[managedByLabel] != managedByValue
	}
	dss := &appsv1.DaemonSetList{}
	if err := r.reader.List(ctx, dss, client.InNamespace(r.opts.TakeOverFrom), forDomain); err != nil {
		return nil, fmt.Errorf("listing the previous controller's DaemonSets: %w", err)
	}
	for i := range dss.Items {
		if previous(dss.Items[i].Labels) {
			out = append(out, previousObject{&dss.Items[i], "DaemonSet"})
		}
	}
	rcts := &resourcev1.ResourceClaimTemplateList{}
	if err := r.reader.List(ctx, rcts, client.InNamespace(r.opts.TakeOverFrom), forDomain); err != nil {
		return nil, fmt.Errorf("listing the previous controller's claim templates: %w", err)
	}
	for i := range rcts.Items {
		if previous(rcts.Items[i].Labels) {
			out = append(out, previousObject{&rcts.Items[i], "ResourceClaimTemplate"})
		}
	}
	cliques := &cdv1beta1.ComputeDomainCliqueList{}
	if err := r.reader.List(ctx, cliques, client.InNamespace(r.opts.TakeOverFrom), forDomain); err != nil {
		return nil, fmt.Errorf("listing the previous daemons' cliques: %w", err)
	}
	for i := range cliques.Items {
		if previous(cliques.Items[i].Labels) {
			out = append(out, previousObject{&cliques.Items[i], "ComputeDomainClique"})
		}
	}
	wl := &resourcev1.ResourceClaimTemplate{}
	err := r.reader.Get(ctx, types.NamespacedName{Namespace: cd.Namespace, Name: cd.Spec.Channel.ResourceClaimTemplate.Name}, wl)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("reading the domain's channel claim template: %w", err)
	case previous(wl.Labels):
		out = append(out, previousObject{wl, "ResourceClaimTemplate"})
	}
	return out, nil
}

// removePrevious removes the domain finalizer from obj, if it has it, and deletes obj (its
// dependents in the background). An object already gone is fine.
func (r *Reconciler) removePrevious(ctx context.Context, obj client.Object) error {
	if slices.Contains(obj.GetFinalizers(), cdv1beta1.Finalizer) {
		orig := obj.DeepCopyObject().(client.Object)
		obj.SetFinalizers(slices.DeleteFunc(slices.Clone(obj.GetFinalizers()), func(f string) bool { return f == cdv1beta1.Finalizer }))
		// Not in this controller's cache, which will never show the write: no read waits for it
		// (see NewClient).
		if err := r.client.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.DisableReadYourWritesConsistency); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	uid := obj.GetUID()
	err := r.client.Delete(ctx, obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground), client.DisableReadYourWritesConsistency)
	return client.IgnoreNotFound(err)
}

// resetForeignStatus empties the domain's status when another writer than this controller's
// field manager owns part of it (NVIDIA's controller writes it with updates): server-side apply
// never removes list entries another manager owns, so the previous controller's nodes would
// stay listed for good. The reset is an update of the status subresource with the version read,
// so it never overwrites a newer write; the next pass applies cdplane's status. It reports
// whether it reset.
func (r *Reconciler) resetForeignStatus(ctx context.Context, cd *cdv1beta1.ComputeDomain) (bool, error) {
	fresh := &cdv1beta1.ComputeDomain{}
	if err := r.reader.Get(ctx, client.ObjectKeyFromObject(cd), fresh); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	foreign := slices.ContainsFunc(fresh.ManagedFields, func(f metav1.ManagedFieldsEntry) bool {
		return f.Subresource == "status" && f.Manager != r.opts.FieldManager
	})
	if !foreign {
		return false, nil
	}
	fresh.Status = cdv1beta1.ComputeDomainStatus{}
	if err := r.client.Status().Update(ctx, fresh); err != nil {
		return false, fmt.Errorf("resetting the status the previous controller wrote: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("Reset the status another writer had written, to write cdplane's")
	return true, nil
}
