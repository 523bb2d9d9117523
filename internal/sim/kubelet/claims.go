package kubelet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
)

// errNotReady is a condition worth waiting for, not a failure to report.
var errNotReady = errors.New("not ready")

// preparedClaim is a claim of a pod that its drivers prepared.
type preparedClaim struct {
	podClaim string // name in pod.spec.resourceClaims
	ref      *drapbv1.Claim
	drivers  []string
	devices  []*drapbv1.Device
}

// podClaimNames maps each entry of pod.spec.resourceClaims to the name of its ResourceClaim:
// resourceClaimName, or for a template the name the resourceclaim controller recorded in
// pod.status.resourceClaimStatuses (an entry without a name needs no claim). A template claim
// not recorded yet is errNotReady.
func podClaimNames(pod *corev1.Pod) (map[string]string, error) {
	out := map[string]string{}
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil {
			out[pc.Name] = *pc.ResourceClaimName
			continue
		}
		i := slices.IndexFunc(pod.Status.ResourceClaimStatuses, func(s corev1.PodResourceClaimStatus) bool { return s.Name == pc.Name })
		if i < 0 {
			return nil, fmt.Errorf("claim %s of the pod is not created yet: %w", pc.Name, errNotReady)
		}
		if name := pod.Status.ResourceClaimStatuses[i].ResourceClaimName; name != nil {
			out[pc.Name] = *name
		}
	}
	return out, nil
}

// claimReady says whether a claim is allocated and reserved for the pod.
func claimReady(claim *resourcev1.ResourceClaim, pod *corev1.Pod) error {
	if claim.Status.Allocation == nil {
		return fmt.Errorf("claim %s is not allocated: %w", claim.Name, errNotReady)
	}
	if !slices.ContainsFunc(claim.Status.ReservedFor, func(r resourcev1.ResourceClaimConsumerReference) bool {
		return r.Resource == "pods" && r.UID == pod.UID
	}) {
		return fmt.Errorf("claim %s is not reserved for the pod: %w", claim.Name, errNotReady)
	}
	return nil
}

// claimDrivers lists the drivers of a claim's allocation, sorted.
func claimDrivers(claim *resourcev1.ResourceClaim) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if !seen[r.Driver] {
			seen[r.Driver] = true
			out = append(out, r.Driver)
		}
	}
	sort.Strings(out)
	return out
}

// prepareClaims reads the pod's claims, checks they are allocated and reserved for it, and
// calls NodePrepareResources on every driver of each. It returns the prepared claims; the
// error wraps errNotReady while something is still to come.
func (w *podWorker) prepareClaims(ctx context.Context, pod *corev1.Pod) ([]*preparedClaim, error) {
	names, err := podClaimNames(pod)
	if err != nil || len(names) == 0 {
		return nil, err
	}
	var claims []*preparedClaim
	byDriver := map[string][]*preparedClaim{}
	for _, podClaim := range sortedKeys(names) {
		claim, err := w.k.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, names[podClaim], metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", names[podClaim], err)
		}
		if err := claimReady(claim, pod); err != nil {
			return nil, err
		}
		pc := &preparedClaim{
			podClaim: podClaim,
			ref:      &drapbv1.Claim{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)},
			drivers:  claimDrivers(claim),
		}
		claims = append(claims, pc)
		for _, d := range pc.drivers {
			byDriver[d] = append(byDriver[d], pc)
		}
	}
	w.n.refClaims(pod.UID, claims)
	for _, driver := range sortedKeys(byDriver) {
		p := w.n.plugin(driver)
		if p == nil {
			return nil, fmt.Errorf("DRA driver %s is not registered on node %s: %w", driver, w.n.spec.Name, errNotReady)
		}
		req := &drapbv1.NodePrepareResourcesRequest{}
		for _, pc := range byDriver[driver] {
			req.Claims = append(req.Claims, pc.ref)
		}
		resp, err := p.client.NodePrepareResources(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("NodePrepareResources of driver %s: %w", driver, err)
		}
		for _, pc := range byDriver[driver] {
			r, ok := resp.Claims[pc.ref.Uid]
			switch {
			case !ok:
				return nil, fmt.Errorf("driver %s did not answer for claim %s", driver, pc.ref.Name)
			case r.Error != "":
				return nil, fmt.Errorf("driver %s, claim %s: %s", driver, pc.ref.Name, r.Error)
			}
			pc.devices = append(pc.devices, r.Devices...)
		}
	}
	return claims, nil
}

// refClaims records that the pod uses these claims on this node.
func (n *node) refClaims(pod types.UID, claims []*preparedClaim) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range claims {
		uid := types.UID(c.ref.Uid)
		if n.claimRef[uid] == nil {
			n.claimRef[uid] = map[types.UID]bool{}
		}
		n.claimRef[uid][pod] = true
	}
}

// releaseClaims drops the pod's use of its claims and returns those no other pod of this node
// uses, which are to be unprepared.
func (n *node) releaseClaims(pod types.UID, claims []*preparedClaim) []*preparedClaim {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*preparedClaim
	for _, c := range claims {
		uid := types.UID(c.ref.Uid)
		delete(n.claimRef[uid], pod)
		if len(n.claimRef[uid]) == 0 {
			delete(n.claimRef, uid)
			out = append(out, c)
		}
	}
	return out
}

// unprepareClaims calls NodeUnprepareResources on every driver of the given claims.
func (w *podWorker) unprepareClaims(ctx context.Context, claims []*preparedClaim) error {
	byDriver := map[string][]*drapbv1.Claim{}
	for _, c := range claims {
		for _, d := range c.drivers {
			byDriver[d] = append(byDriver[d], c.ref)
		}
	}
	var errs []error
	for _, driver := range sortedKeys(byDriver) {
		p := w.n.plugin(driver)
		if p == nil {
			errs = append(errs, fmt.Errorf("DRA driver %s is not registered on node %s", driver, w.n.spec.Name))
			continue
		}
		resp, err := p.client.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: byDriver[driver]})
		if err != nil {
			errs = append(errs, fmt.Errorf("NodeUnprepareResources of driver %s: %w", driver, err))
			continue
		}
		for _, c := range byDriver[driver] {
			if r, ok := resp.Claims[c.Uid]; ok && r.Error != "" {
				errs = append(errs, fmt.Errorf("driver %s, claim %s: %s", driver, c.Name, r.Error))
			}
		}
	}
	return errors.Join(errs...)
}

// containerCDIDevices lists the CDI device ids a container gets: those of the devices of every
// claim it names in resources.claims, restricted to one request when it names one (a device
// serving "req/sub" belongs to request "req").
func containerCDIDevices(c *corev1.Container, claims []*preparedClaim) []string {
	var ids []string
	seen := map[string]bool{}
	for _, rc := range c.Resources.Claims {
		for _, pc := range claims {
			if pc.podClaim != rc.Name {
				continue
			}
			for _, d := range pc.devices {
				if rc.Request != "" && !slices.ContainsFunc(d.RequestNames, func(r string) bool {
					return r == rc.Request || strings.HasPrefix(r, rc.Request+"/")
				}) {
					continue
				}
				for _, id := range d.CdiDeviceIds {
					if !seen[id] {
						seen[id] = true
						ids = append(ids, id)
					}
				}
			}
		}
	}
	return ids
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
