package failure

// Reasons of the Warning events the plugin posts on the pods of a claim whose prepare failed
// for a reason the claim's author can fix (a UserError). Failures of the node or the operator
// (NVML, the fabric, the driver root, a daemon not Ready yet) post none: the node's events and
// the ComputeDomain's conditions tell those.
const (
	// ReasonComputeDomainNotFound: the claim names a ComputeDomain (by UID) that does not
	// exist, or is not this plane's: it was deleted, or the claim was not made from a current
	// domain's ResourceClaimTemplate. Retryable: posted once it has lasted UserErrorGrace.
	ReasonComputeDomainNotFound = "ComputeDomainNotFound"
	// ReasonComputeDomainInOtherNamespace: the channel claim is in another namespace than its
	// ComputeDomain.
	ReasonComputeDomainInOtherNamespace = "ComputeDomainInOtherNamespace"
	// ReasonComputeDomainDeleting: the claim's ComputeDomain is being deleted.
	ReasonComputeDomainDeleting = "ComputeDomainDeleting"
	// ReasonComputeDomainConfigMissing: no ComputeDomainChannelConfig (opaque config of this
	// driver) applies to a request for a channel (or no daemon config to a daemon request).
	ReasonComputeDomainConfigMissing = "ComputeDomainConfigMissing"
	// ReasonInvalidComputeDomainConfig: an opaque config of this driver does not decode (an
	// unknown field, a wrong kind or apiVersion, a bad value) or is of the wrong kind for its
	// device (a daemon config on a channel).
	ReasonInvalidComputeDomainConfig = "InvalidComputeDomainConfig"
	// ReasonConflictingComputeDomainConfig: the requests of one claim name different
	// ComputeDomains or allocation modes, or the claim holds channels and the daemon device.
	ReasonConflictingComputeDomainConfig = "ConflictingComputeDomainConfig"
	// ReasonNodeServesOtherComputeDomain: the node is labelled for another ComputeDomain (a node
	// serves one at a time). Retryable: posted once it has lasted UserErrorGrace.
	ReasonNodeServesOtherComputeDomain = "NodeServesOtherComputeDomain"
)

// PodEventReasons lists the reasons of pod events.
var PodEventReasons = []string{ReasonComputeDomainNotFound, ReasonComputeDomainInOtherNamespace, ReasonComputeDomainDeleting,
	ReasonComputeDomainConfigMissing, ReasonInvalidComputeDomainConfig, ReasonConflictingComputeDomainConfig,
	ReasonNodeServesOtherComputeDomain}
