package lifecycle

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/secretmirror"
	"cdplane/internal/scheme"
)

// Result says what an Assign or Unassign changed, one line per change; none when the target
// was already as asked.
type Result struct {
	Target  Target
	ID      string
	Changes []string
	// Warnings say what could not be done that the assignment itself does not need.
	Warnings []string
}

func (r *Result) add(format string, args ...any) {
	r.Changes = append(r.Changes, fmt.Sprintf(format, args...))
}

func (r *Result) warn(format string, args ...any) {
	r.Warnings = append(r.Warnings, fmt.Sprintf(format, args...))
}

// command is the cdplane command line that repeats this assignment or unassignment.
func (r *Result) command(verb string) string {
	return commandLine(verb+" "+string(r.Target.Kind)+" "+r.Target.Name, r.ID)
}

// partial wraps the failure of a step after the label step: what this run did (r.Changes),
// what is left, and the same command again, which finishes it.
func (r *Result) partial(verb string, err error, notDone string) error {
	return &PartialError{Err: err, Done: r.Changes, NotDone: notDone, Finish: r.command(verb)}
}

// Assign assigns a namespace or node to plane id: it sets the label
// resource.nvidia.com/control-plane-id=<id> and, for a namespace, creates the plane's
// RoleBindings there (RoleBindings). Ownership is checked on a fresh read before the first
// change, and the label is written with that read's resourceVersion, so a concurrent change
// makes it read and check again. A bad id or target (ValidateAssignment) is refused before
// anything is read. Refusals (CheckAssign, PlanRoleBinding) are RefusedErrors and change
// nothing. Assigning what the plane already owns is a no-op. An assigned node is also recorded
// in ConfigMap kube-system/cdplane-node-assignments (NodeAssignments), so that a node deleted
// and registered again without its label is reported (CheckNodeAssignments); a caller not
// allowed to write the record gets a warning. A failure after the label was set is a
// PartialError naming what is done and the command that finishes it.
func Assign(ctx context.Context, c client.Client, id string, t Target) (*Result, error) {
	if err := ValidateAssignment(id, t); err != nil {
		return nil, err
	}
	res := &Result{Target: t, ID: id}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := getTarget(ctx, c, t)
		if err != nil {
			return err
		}
		domains, err := domainsOf(ctx, c, t, obj)
		if err != nil {
			return err
		}
		already, err := CheckAssign(t, id, obj.GetLabels(), domains)
		if err != nil {
			return err
		}
		if t.Kind == KindNamespace {
			// Refuse a foreign same-named RoleBinding before anything changes.
			if _, err := planRoleBindings(ctx, c, id, t); err != nil {
				return err
			}
		}
		if already {
			return nil
		}
		if err := patchLabel(ctx, c, obj, &id); err != nil {
			return fmt.Errorf("labelling %s: %w", t, err)
		}
		res.add("label %s=%s set on %s", cdv1beta1.ControlPlaneLabel, id, t)
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch t.Kind {
	case KindNamespace:
		if err := ensureRoleBindings(ctx, c, id, t, res); err != nil {
			return res, res.partial("assign", err, fmt.Sprintf(
				"the plane's RoleBindings in %s (without them its controller and daemons cannot serve the namespace)", t))
		}
	case KindNode:
		if err := recordNode(ctx, c, id, t.Name, res); apierrors.IsForbidden(err) {
			res.warn("the assignment is not recorded (%v): if the node is deleted and registers again, `cdplane assign node --check` will not report its lost label; an identity allowed to write %s can record it by running %s",
				err, describeNodeRecord(), res.command("assign"))
		} else if err != nil {
			return res, res.partial("assign", err, "recording the assignment in "+describeNodeRecord()+" (it lets `cdplane assign node --check` report the node if it registers again without its label)")
		}
	}
	return res, nil
}

// Unassign removes a namespace or node from plane id: it removes the plane label and, for a
// namespace, the plane's mirrored Secrets and then its RoleBindings there. A bad id or target
// (ValidateAssignment) is refused before anything is read. It is refused when another plane
// owns the target; unless force, while the target holds (a namespace) or serves (a node) live
// ComputeDomains of this plane; and, force or not, while a namespace holds ResourceClaims that
// cdplane's driver allocated and pods use (CheckClaimsInUse). Unassigning what carries no label
// only removes what the plane left behind (RoleBindings; a node's recorded assignment, even
// when the node no longer exists).
func Unassign(ctx context.Context, c client.Client, id string, t Target, force bool) (*Result, error) {
	if err := ValidateAssignment(id, t); err != nil {
		return nil, err
	}
	res := &Result{Target: t, ID: id}
	absent := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := getTarget(ctx, c, t)
		if t.Kind == KindNode && apierrors.IsNotFound(err) {
			// A deleted node: only its recorded assignment is left to forget.
			recorded, rerr := NodeAssignments(ctx, c)
			if rerr != nil {
				return rerr
			}
			if recorded[t.Name] != id {
				return err
			}
			absent = true
			return nil
		}
		if err != nil {
			return err
		}
		domains, err := domainsOf(ctx, c, t, obj)
		if err != nil {
			return err
		}
		owned, err := CheckUnassign(t, id, obj.GetLabels(), domains, force)
		if err != nil || !owned {
			return err
		}
		if t.Kind == KindNamespace {
			claims, err := claimsOf(ctx, c, t)
			if err != nil {
				return err
			}
			if err := CheckClaimsInUse(t, id, claims); err != nil {
				return err
			}
		}
		if err := patchLabel(ctx, c, obj, nil); err != nil {
			return fmt.Errorf("removing the label of %s: %w", t, err)
		}
		res.add("label %s removed from %s", cdv1beta1.ControlPlaneLabel, t)
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch t.Kind {
	case KindNamespace:
		// The copies go before the RoleBindings: the plane's controller, which also removes
		// them when a namespace leaves, needs its rights there to do so.
		if err := removeMirroredCopies(ctx, c, id, t, res); err != nil {
			return res, res.partial("unassign", err, "removing the plane's mirrored Secrets and RoleBindings in "+t.String())
		}
		if err := removeRoleBindings(ctx, c, id, t, res); err != nil {
			return res, res.partial("unassign", err, "removing the plane's RoleBindings in "+t.String())
		}
		if err := removeQuota(ctx, c, id, t, res); err != nil {
			return res, res.partial("unassign", err, "removing the plane's ResourceQuota in "+t.String())
		}
	case KindNode:
		err := forgetNodes(ctx, c, id, func(node string) bool { return node == t.Name }, res)
		if apierrors.IsForbidden(err) {
			if absent {
				return res, err
			}
			res.warn("the assignment stays recorded (%v): `cdplane assign node --check` will report the node; an identity allowed to write %s can remove it by running %s",
				err, describeNodeRecord(), res.command("unassign"))
		} else if err != nil {
			return res, res.partial("unassign", err, "removing the assignment from "+describeNodeRecord())
		}
	}
	return res, nil
}

func getTarget(ctx context.Context, c client.Client, t Target) (client.Object, error) {
	var obj client.Object
	switch t.Kind {
	case KindNamespace:
		obj = &corev1.Namespace{}
	case KindNode:
		obj = &corev1.Node{}
	default:
		return nil, fmt.Errorf("unknown kind of target %q: want %s or %s", t.Kind, KindNamespace, KindNode)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: t.Name}, obj); err != nil {
		return nil, fmt.Errorf("reading %s: %w", t, err)
	}
	return obj, nil
}

// domainsOf returns the ComputeDomains a target holds: for a namespace, those in it; for a
// node, the one named by its resource.nvidia.com/computeDomain label, if it still exists.
// Without the ComputeDomain API installed there are none.
func domainsOf(ctx context.Context, c client.Client, t Target, obj client.Object) ([]*cdv1beta1.ComputeDomain, error) {
	var opts []client.ListOption
	uid := ""
	if t.Kind == KindNamespace {
		opts = append(opts, client.InNamespace(t.Name))
	} else {
		if uid = obj.GetLabels()[cdv1beta1.ComputeDomainLabel]; uid == "" {
			return nil, nil
		}
	}
	var list cdv1beta1.ComputeDomainList
	if err := c.List(ctx, &list, opts...); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing the ComputeDomains of %s: %w", t, err)
	}
	var out []*cdv1beta1.ComputeDomain
	for i := range list.Items {
		if uid == "" || string(list.Items[i].UID) == uid {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// patchLabel sets the plane label to *value, or removes it when value is nil, with a merge
// patch carrying the resourceVersion of the read the decision was made on.
func patchLabel(ctx context.Context, c client.Client, obj client.Object, value *string) error {
	base, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("copying %T", obj)
	}
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	if value == nil {
		delete(labels, cdv1beta1.ControlPlaneLabel)
	} else {
		labels[cdv1beta1.ControlPlaneLabel] = *value
	}
	obj.SetLabels(labels)
	return c.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}

type plannedBinding struct {
	action   BindingAction
	existing *rbacv1.RoleBinding
	desired  *rbacv1.RoleBinding
}

func planRoleBindings(ctx context.Context, c client.Client, id string, t Target) ([]plannedBinding, error) {
	var plans []plannedBinding
	for _, desired := range RoleBindings(id, t.Name) {
		var existing *rbacv1.RoleBinding
		rb := &rbacv1.RoleBinding{}
		switch err := c.Get(ctx, client.ObjectKeyFromObject(desired), rb); {
		case err == nil:
			existing = rb
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading RoleBinding %s/%s: %w", desired.Namespace, desired.Name, err)
		}
		action, err := PlanRoleBinding(t, id, existing, desired)
		if err != nil {
			return nil, err
		}
		plans = append(plans, plannedBinding{action: action, existing: existing, desired: desired})
	}
	return plans, nil
}

// ensureRoleBindings converges the plane's RoleBindings in an assigned namespace, reading and
// planning again on a conflict.
func ensureRoleBindings(ctx context.Context, c client.Client, id string, t Target, res *Result) error {
	return retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err)
	}, func() error {
		plans, err := planRoleBindings(ctx, c, id, t)
		if err != nil {
			return err
		}
		for _, p := range plans {
			key := p.desired.Namespace + "/" + p.desired.Name
			switch p.action {
			case BindingCreate:
				if err := c.Create(ctx, p.desired.DeepCopy()); err != nil {
					return fmt.Errorf("creating RoleBinding %s: %w", key, err)
				}
				res.add("RoleBinding %s created (ClusterRole %s)", key, p.desired.RoleRef.Name)
			case BindingUpdate:
				rb := p.existing.DeepCopy()
				rb.Subjects = p.desired.Subjects
				for k, v := range p.desired.Labels {
					rb.Labels[k] = v
				}
				if err := c.Update(ctx, rb); err != nil {
					return fmt.Errorf("updating RoleBinding %s: %w", key, err)
				}
				res.add("RoleBinding %s updated", key)
			case BindingRecreate:
				if err := deleteExact(ctx, c, p.existing); err != nil {
					return fmt.Errorf("deleting RoleBinding %s to replace its roleRef: %w", key, err)
				}
				if err := c.Create(ctx, p.desired.DeepCopy()); err != nil {
					return fmt.Errorf("creating RoleBinding %s: %w", key, err)
				}
				res.add("RoleBinding %s replaced (ClusterRole %s)", key, p.desired.RoleRef.Name)
			}
		}
		return nil
	})
}

// mirroredCopiesSelector selects the Secrets a plane's secret mirror made: the mirror's marker
// secretmirror.MirroredFromLabel present (any source) and the plane label equal to id.
func mirroredCopiesSelector(id string) labels.Selector {
	from, err := labels.NewRequirement(secretmirror.MirroredFromLabel, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant key
	}
	owner, err := labels.NewRequirement(cdv1beta1.ControlPlaneLabel, selection.Equals, []string{id})
	if err != nil {
		panic(err) // callers pass a validated id
	}
	return labels.NewSelector().Add(*from, *owner)
}

// removeMirroredCopies deletes the plane's mirrored Secrets from a namespace that left it, each
// unchanged since it was listed; a changed one is listed and checked again.
func removeMirroredCopies(ctx context.Context, c client.Client, id string, t Target, res *Result) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		list := scheme.MetaList(corev1.SchemeGroupVersion.WithKind("SecretList"))
		if err := c.List(ctx, list, client.InNamespace(t.Name), client.MatchingLabelsSelector{Selector: mirroredCopiesSelector(id)}); err != nil {
			return fmt.Errorf("listing control plane %q's mirrored Secrets in %s: %w", id, t, err)
		}
		for i := range list.Items {
			s := &list.Items[i]
			s.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
			if err := deleteExact(ctx, c, s); apierrors.IsNotFound(err) {
				continue
			} else if err != nil {
				return fmt.Errorf("deleting mirrored Secret %s/%s: %w", s.Namespace, s.Name, err)
			}
			res.add("mirrored Secret %s/%s deleted", s.Namespace, s.Name)
		}
		return nil
	})
}

// removeRoleBindings deletes the plane's RoleBindings from a namespace: exactly named, carrying
// the plane's label, and unchanged since they were read.
func removeRoleBindings(ctx context.Context, c client.Client, id string, t Target, res *Result) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		for _, desired := range RoleBindings(id, t.Name) {
			key := desired.Namespace + "/" + desired.Name
			rb := &rbacv1.RoleBinding{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(desired), rb); apierrors.IsNotFound(err) {
				continue
			} else if err != nil {
				return fmt.Errorf("reading RoleBinding %s: %w", key, err)
			}
			if v, ok := planeLabel(rb.Labels); !ok || v != id {
				continue // not the plane's: left alone
			}
			if err := deleteExact(ctx, c, rb); apierrors.IsNotFound(err) {
				continue
			} else if err != nil {
				return fmt.Errorf("deleting RoleBinding %s: %w", key, err)
			}
			res.add("RoleBinding %s deleted", key)
		}
		return nil
	})
}

// deleteExact deletes the object read, not a successor: a changed or replaced object is a
// conflict.
func deleteExact(ctx context.Context, c client.Client, obj client.Object) error {
	uid, rv := obj.GetUID(), obj.GetResourceVersion()
	return c.Delete(ctx, obj, client.Preconditions{UID: &uid, ResourceVersion: &rv})
}
