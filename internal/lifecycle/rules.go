package lifecycle

import (
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdv1beta1 "cdplane/api/v1beta1"
	charts "cdplane/deployments/helm"
	"cdplane/internal/plane"
	"cdplane/internal/refusal"
)

// Helm's ownership annotations on the objects of a release.
const (
	releaseNameAnnotation      = "meta.helm.sh/release-name"
	releaseNamespaceAnnotation = "meta.helm.sh/release-namespace"
)

// CheckNamespace decides whether plane id may use namespace name, given the namespace as it
// exists (nil: absent, the install creates it). A plane with an id uses only namespaces
// labelled for it; the legacy plane only namespaces without a plane label that cdplane created
// (app.kubernetes.io/part-of=cdplane). Anything else is refused, naming the namespace.
func CheckNamespace(id, name string, ns metav1.Object) error {
	if ns == nil {
		return nil
	}
	if ns.GetDeletionTimestamp() != nil {
		return fmt.Errorf("namespace %s is being deleted; wait until it is gone", name)
	}
	v, labelled := ns.GetLabels()[cdv1beta1.ControlPlaneLabel]
	switch {
	case id != "" && labelled && v == id:
		return nil
	case labelled && v != id:
		owner := fmt.Sprintf("control plane %q", v)
		if v == "" {
			owner = "an empty control-plane id"
		}
		return refusal.Errorf("namespace %s is labelled %s=%s for %s, not %s; nothing was changed",
			name, cdv1beta1.ControlPlaneLabel, v, owner, describePlane(id))
	case id != "":
		return refusal.Errorf("namespace %s exists without the label %s=%s; if it is meant for control plane %q, label it (as a cluster administrator) and run again; nothing was changed",
			name, cdv1beta1.ControlPlaneLabel, id, id)
	case ns.GetLabels()[partOfLabel] != partOfValue:
		return refusal.Errorf("namespace %s exists and was not created for the legacy control plane (no label %s=%s); if it is meant for it, label it and run again; nothing was changed",
			name, partOfLabel, partOfValue)
	}
	return nil
}

// CheckClusterScoped decides whether an existing cluster-scoped object may be written by the
// release: only when Helm's ownership annotations name this very release (an install or apply
// never adopts an object created by hand or by another release). nil existing: absent, fine.
func CheckClusterScoped(release, namespace, kind string, existing metav1.Object) error {
	if existing == nil {
		return nil
	}
	a := existing.GetAnnotations()
	r, rns := a[releaseNameAnnotation], a[releaseNamespaceAnnotation]
	if r == release && rns == namespace {
		return nil
	}
	owner := "not managed by Helm"
	if r != "" {
		owner = fmt.Sprintf("owned by Helm release %s/%s", rns, r)
	}
	return refusal.Errorf("%s %s exists and is %s, not by release %s/%s; nothing was changed",
		kind, existing.GetName(), owner, namespace, release)
}

// CheckCanonical checks that every cluster-scoped object the plane chart renders for id is named
// exactly plane.Name(id, <its legacy name>), pairing the objects of the id render with those of
// the legacy render (the same values, no id). The legacy render's cluster-wide bindings of the
// namespaced roles have no counterpart with an id.
func CheckCanonical(id string, rendered, legacy []charts.Manifest) error {
	var legacyPaired []charts.Manifest
	for _, m := range legacy {
		if m.Object.GetKind() == "ClusterRoleBinding" && strings.HasSuffix(m.Object.GetName(), "-namespaced") && id != "" {
			continue
		}
		legacyPaired = append(legacyPaired, m)
	}
	if len(rendered) != len(legacyPaired) {
		return fmt.Errorf("the plane chart renders %d objects for control plane %q and %d for the legacy plane: cannot check its names", len(rendered), id, len(legacyPaired))
	}
	var bad []string
	for i, m := range rendered {
		o, l := m.Object, legacyPaired[i].Object
		if o.GetNamespace() != "" {
			continue
		}
		if want := plane.Name(id, l.GetName()); o.GetKind() != l.GetKind() || o.GetName() != want {
			bad = append(bad, fmt.Sprintf("%s %s (want %s)", o.GetKind(), o.GetName(), want))
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("cluster-scoped objects not named canonically for control plane %q: %s", id, strings.Join(bad, ", "))
	}
	return nil
}

// DomainsBlockingDestroy returns the refusal of destroying plane id while it has these
// ComputeDomains, or nil when there are none.
func DomainsBlockingDestroy(id string, domains []cdv1beta1.ComputeDomain) error {
	if len(domains) == 0 {
		return nil
	}
	names := make([]string, 0, len(domains))
	for _, cd := range domains {
		names = append(names, cd.Namespace+"/"+cd.Name)
	}
	sort.Strings(names)
	const most = 10
	list := strings.Join(names, ", ")
	if len(names) > most {
		list = strings.Join(names[:most], ", ") + fmt.Sprintf(" and %d more", len(names)-most)
	}
	return refusal.Errorf("%s still has %d ComputeDomains: %s; delete them first, or pass --delete-domains to delete them and wait for their clean-up; nothing was changed",
		describePlane(id), len(domains), list)
}

func describePlane(id string) string {
	if id == "" {
		return "the legacy control plane"
	}
	return fmt.Sprintf("control plane %q", id)
}
