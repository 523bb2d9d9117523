package lifecycle

import (
	"context"
	"fmt"
	"sort"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
)

// ClaimsInUse returns the claims among these that cdplane's driver (cdv1beta1.DriverName)
// allocated a device to and that a consumer uses (status.reservedFor not empty: prepared, or
// about to be, for a pod), each as "<namespace>/<name> (reserved for <resource>/<name>, ...)",
// sorted.
func ClaimsInUse(claims []resourcev1.ResourceClaim) []string {
	var out []string
	for i := range claims {
		c := &claims[i]
		if c.Status.Allocation == nil || len(c.Status.ReservedFor) == 0 || !allocatedBy(c.Status.Allocation, cdv1beta1.DriverName) {
			continue
		}
		users := make([]string, 0, len(c.Status.ReservedFor))
		for _, r := range c.Status.ReservedFor {
			users = append(users, r.Resource+"/"+r.Name)
		}
		out = append(out, fmt.Sprintf("%s/%s (reserved for %s)", c.Namespace, c.Name, strings.Join(first(users, 3), ", ")))
	}
	sort.Strings(out)
	return out
}

func allocatedBy(a *resourcev1.AllocationResult, driver string) bool {
	for _, r := range a.Devices.Results {
		if r.Driver == driver {
			return true
		}
	}
	return false
}

// CheckClaimsInUse refuses to unassign a namespace, forced or not, while it holds claims that
// cdplane's driver allocated and pods use (ClaimsInUse): the plane's controller and daemons keep
// serving those pods' domains through their RoleBindings there, and a domain is finalized only
// once its claims are released. --force skips the live-ComputeDomain check, never this one.
func CheckClaimsInUse(t Target, id string, claims []resourcev1.ResourceClaim) error {
	if t.Kind != KindNamespace {
		return nil
	}
	inUse := ClaimsInUse(claims)
	if len(inUse) == 0 {
		return nil
	}
	return &RefusedError{Target: t, ID: id, Reason: fmt.Sprintf(
		"holds ResourceClaims that %s allocated and pods use: %s; control plane %q keeps its rights here until they are released (otherwise its domains could not be finalized): stop those pods first; --force does not override this",
		cdv1beta1.DriverName, strings.Join(first(inUse, 5), ", "), id)}
}

// claimsOf lists the ResourceClaims of a namespace; none where the API is not served.
func claimsOf(ctx context.Context, c client.Client, t Target) ([]resourcev1.ResourceClaim, error) {
	list := &resourcev1.ResourceClaimList{}
	if err := c.List(ctx, list, client.InNamespace(t.Name)); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing the ResourceClaims of %s: %w", t, err)
	}
	return list.Items, nil
}
