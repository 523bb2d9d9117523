package plane

import (
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	cdv1beta1 "cdplane/api/v1beta1"
)

// Owns reports whether an object with these labels belongs to the plane: for the legacy plane
// (id ""), objects without the plane label; otherwise objects labelled with the id. A label
// alone proves ownership only inside a namespace the plane owns, or under the plane's exact
// canonical name for cluster-scoped objects; callers check that too.
func Owns(id string, objLabels map[string]string) bool {
	v, ok := objLabels[cdv1beta1.ControlPlaneLabel]
	if id == "" {
		return !ok
	}
	return ok && v == id
}

// Selector selects the plane's objects at the cache: the label equal to the id, or for the
// legacy plane the label absent.
func Selector(id string) labels.Selector {
	op, values := selection.Equals, []string{id}
	if id == "" {
		op, values = selection.DoesNotExist, nil
	}
	req, err := labels.NewRequirement(cdv1beta1.ControlPlaneLabel, op, values)
	if err != nil {
		panic(err) // the label key is a constant and valid ids are valid label values
	}
	return labels.NewSelector().Add(*req)
}

// Stamp adds the plane label to a label map for a plane with an id; the legacy plane's objects
// carry no trace of the feature.
func Stamp(id string, l map[string]string) map[string]string {
	if id == "" {
		return l
	}
	if l == nil {
		l = map[string]string{}
	}
	l[cdv1beta1.ControlPlaneLabel] = id
	return l
}
