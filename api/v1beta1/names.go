package v1beta1

// Names and defaults that several components derive the same way: each is written here once,
// and every writer and reader uses these.

// DefaultMaxNodesPerIMEXDomain is the default most nodes in one clique (IMEX indexes
// 0..N-1): an NVL72 rack holds 18 compute nodes.
const DefaultMaxNodesPerIMEXDomain = 18

// DaemonSetPrefix starts the name of every domain's daemon DaemonSet.
const DaemonSetPrefix = "computedomain-daemon-"

// DaemonSetName is the name of a domain's daemon DaemonSet and of its daemon
// ResourceClaimTemplate, both in the plane's driver namespace.
func DaemonSetName(cdUID string) string { return DaemonSetPrefix + cdUID }

// CliqueName is the name of a domain's ComputeDomainClique object for one clique:
// "<cdUID>.<cliqueID>".
func CliqueName(cdUID, cliqueID string) string { return cdUID + "." + cliqueID }

// Paths inside a daemon container.
const (
	// DaemonIMEXConfigDir is where a daemon container finds its domain's IMEX config
	// directory (mounted by the kubelet plugin through the daemon claim's CDI edits).
	DaemonIMEXConfigDir = "/etc/nvidia-imex"
	// DaemonHostsFile is the hosts file a daemon writes its peers' names into: the
	// container's resolver file, which the real IMEX reads through the system resolver.
	DaemonHostsFile = "/etc/hosts"
)
