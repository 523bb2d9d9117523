package computedomain

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
)

// allocatedNodes returns the nodes on which the scheduler allocated a channel claim of the
// domain. The node label is something a node can set on itself; an allocation only the
// scheduler writes (resourceclaims/status), so membership requires both. The claims come from
// the cache, which holds only claims labelled for a domain (the workload claim template makes its
// claims carry the domain's labels); a label proves nothing, so each claim is checked in full.
func (r *Reconciler) allocatedNodes(ctx context.Context, cd *cdv1beta1.ComputeDomain) (sets.Set[string], error) {
	list := &resourcev1.ResourceClaimList{}
	if err := r.client.List(ctx, list, client.InNamespace(cd.Namespace),
		client.MatchingLabels{cdv1beta1.ComputeDomainLabel: string(cd.UID)}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing channel claims: %w", err)
	}
	nodes := sets.New[string]()
	// A domain's channel claims carry the same opaque config: each distinct one is parsed once
	// a pass, not once per claim (parsed per claim, it was a large share of a large domain's
	// pass's CPU).
	domains := domainParser{}
	for i := range list.Items {
		if node := channelClaimNode(&list.Items[i], cd.Namespace, string(cd.UID), domains.parse); node != "" {
			nodes.Insert(node)
		}
	}
	return nodes, nil
}

// domainParser remembers channelDomain's answer for each config it parsed.
type domainParser map[string]string

func (p domainParser) parse(raw []byte) string {
	if uid, ok := p[string(raw)]; ok {
		return uid
	}
	uid := channelDomain(raw)
	p[string(raw)] = uid
	return uid
}

// channelClaimNode returns the node on which claim holds an allocated channel of the domain
// with this UID, or "": the claim must be in the domain's namespace, and its allocation, as the
// scheduler wrote it, must hold a device of this driver from the pool named after the node (the
// kubelet plugin publishes one pool per node, named after it) on exactly that node (the
// allocation's node selector), configured by an opaque ComputeDomainChannelConfig whose domainID
// is the domain's UID.
func channelClaimNode(claim *resourcev1.ResourceClaim, namespace, uid string, domainOf func([]byte) string) string {
	alloc := claim.Status.Allocation
	if claim.Namespace != namespace || alloc == nil || claim.DeletionTimestamp != nil {
		return ""
	}
	node := selectedNode(alloc.NodeSelector)
	if node == "" {
		return ""
	}
	for _, res := range alloc.Devices.Results {
		if res.Driver != cdv1beta1.DriverName || res.Pool != node {
			continue
		}
		for _, c := range alloc.Devices.Config {
			if c.Opaque != nil && c.Opaque.Driver == cdv1beta1.DriverName && appliesTo(c.Requests, res.Request) &&
				domainOf(c.Opaque.Parameters.Raw) == uid {
				return node
			}
		}
	}
	return ""
}

// selectedNode returns the one node a node selector of an allocation names, as the scheduler
// writes it for node-local devices (one term, one field requirement metadata.name In [node]);
// "" for any other selector.
func selectedNode(ns *corev1.NodeSelector) string {
	if ns == nil || len(ns.NodeSelectorTerms) != 1 {
		return ""
	}
	t := ns.NodeSelectorTerms[0]
	if len(t.MatchExpressions) != 0 || len(t.MatchFields) != 1 {
		return ""
	}
	f := t.MatchFields[0]
	if f.Key != "metadata.name" || f.Operator != corev1.NodeSelectorOpIn || len(f.Values) != 1 {
		return ""
	}
	return f.Values[0]
}

// appliesTo reports whether a config listing requests applies to a result of request req
// (empty: all requests; a sub-request "req/sub" is configured by its request's name too).
func appliesTo(requests []string, req string) bool {
	if len(requests) == 0 {
		return true
	}
	parent, _, _ := strings.Cut(req, "/")
	return slices.Contains(requests, req) || slices.Contains(requests, parent)
}

// channelDomain returns the domainID of opaque parameters that are a ComputeDomainChannelConfig
// of this API version, or "".
func channelDomain(raw []byte) string {
	var c cdv1beta1.ComputeDomainChannelConfig
	if err := json.Unmarshal(raw, &c); err != nil {
		return ""
	}
	if c.APIVersion != cdv1beta1.GroupVersion.String() || c.Kind != cdv1beta1.ComputeDomainChannelConfigKind {
		return ""
	}
	return c.DomainID
}
