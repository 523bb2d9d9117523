package v1beta1

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

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

// ValidateCliqueID returns an error when a clique id, as a daemon labels its pod with it, cannot
// name a ComputeDomainClique: it must be empty (no NVLink fabric) or a valid label value that is
// also a DNS-1123 subdomain (lower case), so that "<cdUID>.<cliqueID>" is a valid object name
// and the clique can carry it as its CliqueIDLabel. Real ids, "<clusterUUID>.<cliqueId>" as
// NVML reports them, always are.
func ValidateCliqueID(id string) error {
	if id == "" {
		return nil
	}
	errs := validation.IsValidLabelValue(id)
	errs = append(errs, validation.IsDNS1123Subdomain(id)...)
	if len(errs) > 0 {
		return fmt.Errorf("invalid clique id %q: %s", id, strings.Join(errs, "; "))
	}
	return nil
}
