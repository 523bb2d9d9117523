package claims

import (
	"context"
	"errors"
	"fmt"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"cdplane/internal/features"
	"cdplane/internal/kubeletplugin/cdi"
	"cdplane/internal/kubeletplugin/checkpoint"
	"cdplane/internal/kubeletplugin/devices"
	"cdplane/internal/kubeletplugin/failure"
	"cdplane/internal/kubeletplugin/readiness"
)

// checkDomainNamespace is the first step of a channel prepare: a workload may only use a
// domain of its own namespace.
func checkDomainNamespace(claimNS, claimName, cdNS, cdName string) error {
	if claimNS != cdNS {
		return failure.Permanentf("claim %s/%s is in namespace %s, but its ComputeDomain %s is in namespace %s: a channel claim must be in its ComputeDomain's namespace",
			claimNS, claimName, claimNS, cdName, cdNS)
	}
	return nil
}

// CheckDomain runs the checks of the claim's ComputeDomain, found in the cache (err from the
// lookup otherwise): it must exist, be in the claim's namespace and not be being deleted (its
// daemons are going, and the node label this prepare would add is one the controller is
// removing). Each refusal is tagged as a failure.UserError; a failed lookup is not.
func CheckDomain(claimNS, claimName, uid string, cd *metav1.PartialObjectMetadata, err error) error {
	var notFound *readiness.DomainNotFoundError
	switch {
	case errors.As(err, &notFound):
		return failure.UserFixable(err, failure.ReasonComputeDomainNotFound, "with UID "+uid)
	case err != nil:
		return err
	}
	domain := cd.Namespace + "/" + cd.Name
	if err := checkDomainNamespace(claimNS, claimName, cd.Namespace, cd.Name); err != nil {
		return failure.UserFixable(err, failure.ReasonComputeDomainInOtherNamespace, domain)
	}
	if cd.DeletionTimestamp != nil {
		return failure.UserFixable(failure.Permanentf("ComputeDomain %s (UID %s) is being deleted (since %s): its channels are no longer prepared",
			domain, uid, cd.DeletionTimestamp.UTC().Format(time.RFC3339)), failure.ReasonComputeDomainDeleting, domain)
	}
	return nil
}

// prepareChannel runs the channel steps in order: the claim's domain must exist, be in the
// claim's namespace and not be being deleted (CheckDomain); the node is labelled for the domain
// (refused when it serves another); the node's IMEX must be ready (waitIMEXReady: the domain's daemon, waited for on
// the watch cache until deadline, or the host service), else a retryable error; then the CDI
// spec injects the allocated channel (Single) or every channel (All). A node without fabric
// gets no CDI device at all.
func (s *State) prepareChannel(ctx context.Context, claim *resourcev1.ResourceClaim, plan claimPlan, deadline time.Time) ([]checkpoint.PreparedDevice, string, error) {
	logger := klog.FromContext(ctx)
	cd, lookupErr := s.view.Domain(ctx, plan.DomainID)
	if err := CheckDomain(claim.Namespace, claim.Name, plan.DomainID, cd, lookupErr); err != nil {
		reason := failure.DomainNotFound
		if ue, ok := failure.UserErrorOf(err); ok && ue.Reason == failure.ReasonComputeDomainInOtherNamespace {
			reason = failure.WrongNamespace
		}
		return nil, "", failure.Tag(reason, err)
	}
	if err := s.label.AddDomain(ctx, plan.DomainID); err != nil {
		return nil, "", failure.Tag(failure.NodeLabel, labelRefusal(err, cd.Namespace+"/"+cd.Name))
	}
	cliqueID, err := s.clique.Current()
	if err != nil {
		return nil, "", failure.Tag(failure.CliqueUnknown, err)
	}
	if err := s.waitIMEXReady(ctx, plan.DomainID, cliqueID, deadline); err != nil {
		return nil, "", failure.Tag(failure.IMEXNotReady, err)
	}
	if cliqueID == "" {
		logger.V(1).Info("Node has no NVLink fabric: no channel injected", "computeDomain", klog.KObj(cd))
		return preparedDevices(claim.UID, plan, nil), "", nil
	}
	nodes, err := s.nodes.Channels(channelIDs(plan))
	if err != nil {
		return nil, "", failure.Tag(failure.Driver, failure.Retryablef("channel devices: %w", err))
	}
	spec := channelSpec(claim.UID, plan, nodes)
	name := cdi.SpecName(claim.UID)
	if err := s.cdi.Write(spec, name); err != nil {
		return nil, "", fmt.Errorf("claim %s: %w", claim.UID, err)
	}
	logger.V(1).Info("Injecting IMEX channels", "computeDomain", klog.KObj(cd), "mode", plan.AllocationMode, "channels", len(nodes))
	return preparedDevices(claim.UID, plan, channelCDIDevices(plan)), name, nil
}

// waitIMEXReady is the readiness step of a channel prepare. Driver-managed: the node's daemon
// of the domain must be Ready, waited for until deadline. Host-managed: the host's nvidia-imex
// must answer READY now (a node without a fabric has no IMEX to check); a failure is retryable,
// the kubelet calls again. Either releases opMu (held by the caller) meanwhile, so that other
// claims, the daemon's own among them, are prepared while this one waits.
func (s *State) waitIMEXReady(ctx context.Context, domainID, cliqueID string, deadline time.Time) error {
	waitCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	s.opMu.Unlock()
	defer s.opMu.Lock()
	if s.cfg.IMEXMode != features.IMEXHostManaged {
		return s.view.WaitDaemonReady(waitCtx, domainID, cliqueID, s.cfg.NodeName)
	}
	if cliqueID == "" {
		return nil
	}
	h := devices.HostIMEX{Root: s.cfg.DriverRoot(), Socket: s.cfg.HostIMEXSocketPath}
	if err := h.Check(waitCtx); err != nil {
		return &failure.RetryableError{Err: err}
	}
	return nil
}
