package kubeletplugin

import (
	"context"
	"fmt"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
)

// checkDomainNamespace is the first step of a channel prepare: a workload may only use a
// domain of its own namespace.
func checkDomainNamespace(claimNS, claimName, cdNS, cdName string) error {
	if claimNS != cdNS {
		return permanentf("claim %s/%s is in namespace %s, but its ComputeDomain %s is in namespace %s: a channel claim must be in its ComputeDomain's namespace",
			claimNS, claimName, claimNS, cdName, cdNS)
	}
	return nil
}

// prepareChannel runs the channel steps in order: the claim's namespace must be its domain's
// (else a permanent error); the node is labelled for the domain (refused when it serves
// another); the node's daemon must be Ready, waited for on the watch cache until deadline
// (else a retryable error; other prepares and unprepares run meanwhile); then the CDI spec injects the allocated channel (Single) or every
// channel (All). A node without fabric gets no CDI device at all.
func (d *Driver) prepareChannel(ctx context.Context, claim *resourcev1.ResourceClaim, plan claimPlan, deadline time.Time) ([]PreparedDevice, string, error) {
	logger := klog.FromContext(ctx)
	cd, err := d.view.domain(ctx, plan.DomainID)
	if err != nil {
		return nil, "", err
	}
	if err := checkDomainNamespace(claim.Namespace, claim.Name, cd.Namespace, cd.Name); err != nil {
		return nil, "", err
	}
	if err := d.label.addDomain(ctx, plan.DomainID); err != nil {
		return nil, "", err
	}
	cliqueID, err := d.clique.current()
	if err != nil {
		return nil, "", err
	}
	// The wait releases opMu (held by the caller): the daemon's own claim is prepared meanwhile.
	waitCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	d.opMu.Unlock()
	err = d.view.waitDaemonReady(waitCtx, plan.DomainID, cliqueID, d.opts.NodeName)
	d.opMu.Lock()
	if err != nil {
		return nil, "", err
	}
	if cliqueID == "" {
		logger.V(1).Info("Node has no NVLink fabric: no channel injected", "computeDomain", klog.KObj(cd))
		return preparedDevices(claim.UID, plan, nil), "", nil
	}
	nodes, err := d.nodes.channels(channelIDs(plan))
	if err != nil {
		return nil, "", retryablef("channel devices: %w", err)
	}
	spec := channelSpec(claim.UID, plan, nodes)
	name := CDISpecName(claim.UID)
	if err := d.cdi.write(spec, name); err != nil {
		return nil, "", fmt.Errorf("claim %s: %w", claim.UID, err)
	}
	logger.V(1).Info("Injecting IMEX channels", "computeDomain", klog.KObj(cd), "mode", plan.AllocationMode, "channels", len(nodes))
	return preparedDevices(claim.UID, plan, channelCDIDevices(plan)), name, nil
}
