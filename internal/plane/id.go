// Package plane holds control-plane identity and ownership, which every binary uses: the id
// validator the binaries, the CLI and the chart schema share, the names derived from an id,
// ownership checks, cache selectors and the foreign-refusal metric. What the administrator's
// CLI writes to a cluster (assign, unassign, install, destroy) is in internal/lifecycle.
package plane

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/spf13/pflag"
)

const (
	// MaxIDLength is the longest control-plane id.
	MaxIDLength = 20
	// ReservedID cannot be used as a control-plane id.
	ReservedID = "default"
	// EnvVar sets the control-plane id when the flag is not given.
	EnvVar = "CDPLANE_CONTROL_PLANE_ID"
	// FlagName is the flag of every binary and command that takes an id.
	FlagName = "control-plane-id"
	// maxNameLength is the longest Kubernetes name derived here (a DNS-1123 label).
	maxNameLength = 63
	// hashedPrefixLength is how much of an over-long name is kept before its hash.
	hashedPrefixLength = 54
)

// IDPattern is the DNS-1123 label rule for ids, shared with the chart's values.schema.json.
const IDPattern = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`

var idRE = regexp.MustCompile(IDPattern)

// ValidateID returns nil for a valid id and for "" (the legacy plane), and otherwise an error
// naming the rule that failed.
func ValidateID(id string) error {
	switch {
	case id == "":
		return nil
	case len(id) > MaxIDLength:
		return fmt.Errorf("invalid control-plane id %q: must be at most %d characters, has %d", id, MaxIDLength, len(id))
	case id == ReservedID:
		return fmt.Errorf("invalid control-plane id %q: %q is reserved", id, ReservedID)
	case strings.ToLower(id) != id:
		return fmt.Errorf("invalid control-plane id %q: must be lowercase (a DNS-1123 label)", id)
	case !idRE.MatchString(id):
		return fmt.Errorf("invalid control-plane id %q: must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit", id)
	}
	return nil
}

// Name derives a plane-specific name from its legacy name: the legacy name itself for the legacy
// plane, otherwise "<id>-<legacy>"; past 63 characters, the first 54 characters with trailing
// '-' trimmed, then '-' and the first 8 hex characters of the SHA-256 of the full name.
func Name(id, legacy string) string {
	if id == "" {
		return legacy
	}
	full := id + "-" + legacy
	if len(full) <= maxNameLength {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	return strings.TrimRight(full[:hashedPrefixLength], "-") + "-" + hex.EncodeToString(sum[:])[:8]
}

// IsCanonical reports whether a cluster-scoped object's name is exactly the plane's canonical
// name for a legacy name. A prefix match never counts: "alpha-beta-x" is not plane "alpha"'s.
func IsCanonical(id, legacy, name string) bool {
	return name == Name(id, legacy)
}

// AddFlag registers --control-plane-id, defaulting to $CDPLANE_CONTROL_PLANE_ID.
func AddFlag(fs *pflag.FlagSet, into *string) {
	fs.StringVar(into, FlagName, os.Getenv(EnvVar),
		"Control-plane id: empty for the legacy single plane, otherwise a DNS-1123 label of at most 20 characters, not \"default\" (env "+EnvVar+")")
}

// Legacy names of the objects a plane's installation creates, from which the plane's own are
// derived with Name; the chart uses the same names.
const (
	// DriverNamespaceLegacyName is the legacy plane's driver namespace; a plane's is
	// Name(id, DriverNamespaceLegacyName), "<id>-cdplane".
	DriverNamespaceLegacyName = "cdplane"
	// ControllerServiceAccountLegacyName is the controller's service account in the driver namespace.
	ControllerServiceAccountLegacyName = "cdplane-controller"
	// DaemonServiceAccountLegacyName is the IMEX daemons' service account in the driver namespace.
	DaemonServiceAccountLegacyName = "cdplane-daemon"
	// ControllerNamespacedRoleLegacyName is the ClusterRole the controller is bound to, by a
	// RoleBinding, in every namespace assigned to its plane.
	ControllerNamespacedRoleLegacyName = "cdplane-controller-namespaced"
	// DaemonNamespacedRoleLegacyName is the ClusterRole the daemons are bound to, by a
	// RoleBinding, in every namespace assigned to their plane.
	DaemonNamespacedRoleLegacyName = "cdplane-daemon-namespaced"
)
