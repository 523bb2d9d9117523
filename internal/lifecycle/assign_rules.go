package lifecycle

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/plane"
)

// TargetKind is what can be assigned to a plane.
type TargetKind string

// Kinds of assignment targets.
const (
	KindNamespace TargetKind = "namespace"
	KindNode      TargetKind = "node"
)

// Target is a namespace or node to assign to a plane or unassign from it.
type Target struct {
	Kind TargetKind
	Name string
}

func (t Target) String() string { return string(t.Kind) + " " + t.Name }

// RefusedError is an assignment or unassignment the ownership rules refuse. Nothing was changed.
type RefusedError struct {
	Target Target
	// ID is the plane that asked.
	ID string
	// Reason says which rule refused, naming the objects and planes involved.
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s: %s", e.Target, e.Reason)
}

// Refusal marks a RefusedError as a refusal (refusal.Is): the CLI exits with its refusal code.
func (e *RefusedError) Refusal() {}

// IsRefused reports whether err is, or wraps, a RefusedError.
func IsRefused(err error) bool {
	var r *RefusedError
	return errors.As(err, &r)
}

// ValidateAssignment checks an assign or unassign before anything is read: the id is a valid,
// non-legacy id (the legacy plane owns what carries no plane label, so it is never assigned
// anything); the target is a namespace with a valid namespace name (a DNS-1123 label) or a
// node with a valid node name (a DNS-1123 subdomain); and it is not the plane's own driver
// namespace, which is a RefusedError. A bad id, kind or name is a plain error.
func ValidateAssignment(id string, t Target) error {
	if id == "" {
		return fmt.Errorf("a control-plane id is required (--%s): the legacy plane owns whatever carries no %s label, so nothing is assigned to it or unassigned from it; name the plane whose label to set or remove", plane.FlagName, cdv1beta1.ControlPlaneLabel)
	}
	if err := plane.ValidateID(id); err != nil {
		return err
	}
	var problems []string
	switch t.Kind {
	case KindNamespace:
		problems = validation.IsDNS1123Label(t.Name)
	case KindNode:
		problems = validation.IsDNS1123Subdomain(t.Name)
	default:
		return fmt.Errorf("unknown kind of target %q: want %s or %s", t.Kind, KindNamespace, KindNode)
	}
	switch {
	case t.Name == "":
		return fmt.Errorf("a %s name is required", t.Kind)
	case len(problems) > 0:
		return fmt.Errorf("invalid %s name %q: %s", t.Kind, t.Name, strings.Join(problems, "; "))
	}
	return checkNotDriverNamespace(t, id)
}

// planeLabel returns an object's plane label and whether it has one.
func planeLabel(objLabels map[string]string) (string, bool) {
	v, ok := objLabels[cdv1beta1.ControlPlaneLabel]
	return v, ok
}

// describeOwner names the plane of a label for messages.
func describeOwner(value string, labelled bool) string {
	switch {
	case !labelled:
		return "the legacy plane (no label)"
	case value == "":
		return fmt.Sprintf("an empty %s label", cdv1beta1.ControlPlaneLabel)
	default:
		return fmt.Sprintf("control plane %q", value)
	}
}

// live reports whether a ComputeDomain is not being deleted.
func live(cd *cdv1beta1.ComputeDomain) bool {
	return cd.DeletionTimestamp == nil
}

// listDomains names at most five domains for a message.
func listDomains(cds []*cdv1beta1.ComputeDomain) string {
	const most = 5
	names := make([]string, 0, len(cds))
	for _, cd := range cds {
		v, ok := planeLabel(cd.Labels)
		names = append(names, fmt.Sprintf("%s/%s (%s)", cd.Namespace, cd.Name, describeOwner(v, ok)))
	}
	sort.Strings(names)
	if len(names) > most {
		return strings.Join(names[:most], ", ") + fmt.Sprintf(" and %d more", len(names)-most)
	}
	return strings.Join(names, ", ")
}

// holds describes what a target holding domains means, for messages.
func holds(t Target) string {
	if t.Kind == KindNode {
		return "serves"
	}
	return "holds"
}

// systemNamespace reports the cluster's own namespaces, default and every kube-*: no plane's
// tenants live there, and a plane label and RoleBindings there would hand a plane's controller
// rights over system objects.
func systemNamespace(name string) bool {
	return name == "default" || strings.HasPrefix(name, "kube-")
}

// checkNotDriverNamespace refuses the plane's own driver namespace (its label and RoleBindings
// come with the plane's installation, and the assignment's RoleBindings share their names), the
// legacy plane's driver namespace (it carries no plane label, so the ownership check would not
// see it is taken), and the cluster's system namespaces.
func checkNotDriverNamespace(t Target, id string) error {
	if t.Kind != KindNamespace {
		return nil
	}
	switch {
	case t.Name == plane.Name(id, plane.DriverNamespaceLegacyName):
		return &RefusedError{Target: t, ID: id, Reason: fmt.Sprintf(
			"it is control plane %q's driver namespace, which its installation labels and destroy removes", id)}
	case t.Name == plane.DriverNamespaceLegacyName:
		return &RefusedError{Target: t, ID: id, Reason: "it is the legacy control plane's driver namespace"}
	case systemNamespace(t.Name):
		return &RefusedError{Target: t, ID: id, Reason: "it is a system namespace of the cluster; workloads of a plane belong in namespaces of their own"}
	}
	return nil
}

// CheckAssign decides whether a target with these labels, holding (a namespace) or serving (a
// node, through its resource.nvidia.com/computeDomain label) these ComputeDomains, may be
// assigned to plane id; ValidateAssignment's checks come first. It returns whether the target
// is already the plane's, or a RefusedError: another plane owns the target (its label names
// another id, or is empty), or the target holds live ComputeDomains of another plane, the
// legacy one included.
func CheckAssign(t Target, id string, targetLabels map[string]string, domains []*cdv1beta1.ComputeDomain) (already bool, err error) {
	if err := ValidateAssignment(id, t); err != nil {
		return false, err
	}
	if v, ok := planeLabel(targetLabels); ok && v != id {
		return false, &RefusedError{Target: t, ID: id, Reason: fmt.Sprintf(
			"owned by %s; unassign it from that plane first", describeOwner(v, ok))}
	}
	var foreign []*cdv1beta1.ComputeDomain
	for _, cd := range domains {
		if v, ok := planeLabel(cd.Labels); live(cd) && (!ok || v != id) {
			foreign = append(foreign, cd)
		}
	}
	if len(foreign) > 0 {
		return false, &RefusedError{Target: t, ID: id, Reason: fmt.Sprintf(
			"%s live ComputeDomains of other control planes: %s", holds(t), listDomains(foreign))}
	}
	v, ok := planeLabel(targetLabels)
	return ok && v == id, nil
}

// CheckUnassign decides whether a target may be unassigned from plane id; ValidateAssignment's
// checks come first. It returns whether the target carries the plane's label (false: nothing
// to unassign but leftovers), or a RefusedError: another plane owns the target, or (unless
// force) the target still holds or serves live ComputeDomains of this plane.
func CheckUnassign(t Target, id string, targetLabels map[string]string, domains []*cdv1beta1.ComputeDomain, force bool) (owned bool, err error) {
	if err := ValidateAssignment(id, t); err != nil {
		return false, err
	}
	v, ok := planeLabel(targetLabels)
	if !ok {
		return false, nil
	}
	if v != id {
		return false, &RefusedError{Target: t, ID: id, Reason: fmt.Sprintf(
			"owned by %s, not control plane %q", describeOwner(v, ok), id)}
	}
	if force {
		return true, nil
	}
	var own []*cdv1beta1.ComputeDomain
	for _, cd := range domains {
		if w, labelled := planeLabel(cd.Labels); live(cd) && labelled && w == id {
			own = append(own, cd)
		}
	}
	if len(own) > 0 {
		return false, &RefusedError{Target: t, ID: id, Reason: fmt.Sprintf(
			"still %s live ComputeDomains of control plane %q: %s; delete them first, or unassign with force (they are then no longer reconciled until the %s is assigned again)",
			holds(t), id, listDomains(own), t.Kind)}
	}
	return true, nil
}

// RoleBindings returns the RoleBindings that assigning a namespace to plane id creates there:
// the plane's controller and daemon service accounts, in its driver namespace, bound to the
// plane's namespaced ClusterRoles (plane.Name(id, "cdplane-controller-namespaced"),
// plane.Name(id, "cdplane-daemon-namespaced")). Each is named like its service account
// (plane.Name(id, "cdplane-controller"), plane.Name(id, "cdplane-daemon")) and labelled with the plane.
func RoleBindings(id, namespace string) []*rbacv1.RoleBinding {
	driverNS := plane.Name(id, plane.DriverNamespaceLegacyName)
	bind := func(sa, role string) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{
			TypeMeta: metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
			ObjectMeta: metav1.ObjectMeta{
				Name:      plane.Name(id, sa),
				Namespace: namespace,
				Labels: map[string]string{
					cdv1beta1.ControlPlaneLabel:    id,
					"app.kubernetes.io/managed-by": "cdplane",
				},
			},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: plane.Name(id, role)},
			Subjects: []rbacv1.Subject{{
				Kind: rbacv1.ServiceAccountKind, Name: plane.Name(id, sa), Namespace: driverNS,
			}},
		}
	}
	return []*rbacv1.RoleBinding{
		bind(plane.ControllerServiceAccountLegacyName, plane.ControllerNamespacedRoleLegacyName),
		bind(plane.DaemonServiceAccountLegacyName, plane.DaemonNamespacedRoleLegacyName),
	}
}

// BindingAction is what to do to bring an existing RoleBinding to the desired one.
type BindingAction string

// Actions on a plane RoleBinding.
const (
	BindingCreate   BindingAction = "create"
	BindingNone     BindingAction = "none"
	BindingUpdate   BindingAction = "update"
	BindingRecreate BindingAction = "recreate" // roleRef is immutable
)

// PlanRoleBinding decides how to converge an existing RoleBinding (nil: absent) on the desired
// one. A same-named RoleBinding that does not carry the plane's label is not the plane's: it is
// never overwritten, and the assignment is refused.
func PlanRoleBinding(t Target, id string, existing, desired *rbacv1.RoleBinding) (BindingAction, error) {
	if existing == nil {
		return BindingCreate, nil
	}
	if v, ok := planeLabel(existing.Labels); !ok || v != id {
		return "", &RefusedError{Target: t, ID: id, Reason: fmt.Sprintf(
			"RoleBinding %s/%s exists and is not control plane %q's (it carries %s); remove or rename it",
			existing.Namespace, existing.Name, id, describeOwner(v, ok))}
	}
	if existing.RoleRef != desired.RoleRef {
		return BindingRecreate, nil
	}
	if !equality.Semantic.DeepEqual(existing.Subjects, desired.Subjects) {
		return BindingUpdate, nil
	}
	for k, v := range desired.Labels {
		if existing.Labels[k] != v {
			return BindingUpdate, nil
		}
	}
	return BindingNone, nil
}
