package failure

import "errors"

// Reason says why a prepare or unprepare of a claim failed: the reason label of
// cdplane_kubeletplugin_prepare_errors_total and cdplane_kubeletplugin_unprepare_errors_total.
type Reason string

// Failure reasons, one for each step of a prepare or unprepare that can fail.
const (
	// BadConfig: the claim's allocation or opaque config is invalid (a permanent error).
	BadConfig Reason = "bad_config"
	// WrongNamespace: a channel claim outside its ComputeDomain's namespace, a daemon
	// claim outside the driver namespace (a permanent error).
	WrongNamespace Reason = "wrong_namespace"
	// DomainNotFound: the claim's ComputeDomain is not in the plugin's cache (yet), or
	// it is being deleted.
	DomainNotFound Reason = "domain_not_found"
	// NodeLabel: the node serves another ComputeDomain, or its label could not be
	// written or removed.
	NodeLabel Reason = "node_label"
	// CliqueUnknown: the node's NVLink clique is not known (NVML unavailable, fabric
	// registration in progress or failed).
	CliqueUnknown Reason = "clique_unknown"
	// IMEXNotReady: the node's daemon of the domain was not Ready within
	// --prepare-wait-timeout, or (host-managed) the host IMEX is not ready.
	IMEXNotReady Reason = "imex_not_ready"
	// Driver: the host's NVIDIA driver cannot serve the claim: the driver root lacks
	// nvidia-imex or holds another driver, the driver is too old for IMEXDaemonsWithDNSNames, or
	// the IMEX device numbers cannot be read.
	Driver Reason = "driver"
	// DeviceInUse: a device of the claim is prepared for another claim (checkpoint).
	DeviceInUse Reason = "device_in_use"
	// CDI: a CDI spec could not be written or removed.
	CDI Reason = "cdi_write"
	// Checkpoint: the checkpoint could not be written.
	Checkpoint Reason = "checkpoint"
	// Other: anything else (an unprepare of the claim came meanwhile, a daemon claim on
	// a host-managed node, the domain's config directory could not be written).
	Other Reason = "other"
)

// PrepareReasons and UnprepareReasons are the reasons each can fail with; their counters
// start at zero for the plugin's plane.
var (
	PrepareReasons = []Reason{BadConfig, WrongNamespace, DomainNotFound, NodeLabel,
		CliqueUnknown, IMEXNotReady, Driver, DeviceInUse, CDI, Checkpoint, Other}
	UnprepareReasons = []Reason{NodeLabel, CDI, Checkpoint, Other}
)

// tagged tags an error with the reason it is counted under; its message is the error's.
type tagged struct {
	reason Reason
	err    error
}

func (f *tagged) Error() string { return f.err.Error() }
func (f *tagged) Unwrap() error { return f.err }

// Tag tags err (nil stays nil) with reason, unless it carries one already.
func Tag(reason Reason, err error) error {
	if err == nil {
		return nil
	}
	var f *tagged
	if errors.As(err, &f) {
		return err
	}
	return &tagged{reason: reason, err: err}
}

// ReasonOf returns the reason a failed prepare or unprepare is counted under: the first
// reason err carries, Other when it carries none.
func ReasonOf(err error) Reason {
	var f *tagged
	if errors.As(err, &f) {
		return f.reason
	}
	return Other
}
