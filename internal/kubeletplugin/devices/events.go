package devices

// Reasons of the events the plugin posts about its node (the pods' are in the plugin's podevents.go).
const (
	// ReasonNVMLUnavailable: NVML cannot be loaded, so the node publishes no
	ReasonNVMLUnavailable = "NVMLUnavailable"
	// ReasonFabricNotReady: the NVLink fabric registration has not completed, so the node
	// publishes no devices (workloads go elsewhere meanwhile).
	ReasonFabricNotReady = "FabricNotReady"
	// ReasonFabricFailed: the NVLink fabric registration failed; no
	ReasonFabricFailed = "FabricFailed"
	// ReasonDiscoveryFailed: the clique cannot be discovered for another reason; no
	ReasonDiscoveryFailed = "CliqueDiscoveryFailed"
	// ReasonDevicesPublished: after one of those, the node's devices are published again.
	ReasonDevicesPublished = "DevicesPublished"
	// ReasonDriverRootIncomplete: the driver root lacks what daemon containers need, so every
	// daemon claim on the node will fail until it is fixed.
	ReasonDriverRootIncomplete = "DriverRootIncomplete"
	// ReasonDriverRootMismatch: the driver root holds another driver than the loaded one.
	ReasonDriverRootMismatch = "DriverRootMismatch"
	// ReasonDriverTooOld: IMEXDaemonsWithDNSNames is on and the loaded driver predates the IMEX
	// that takes host names; every daemon claim on the node is refused.
	ReasonDriverTooOld = "DriverTooOld"
	// ReasonHostIMEXNotReady: host-managed mode, and at start the host IMEX is missing or not
	// READY (its socket, nvidia-imex-ctl, or its answer); channel claims wait for it.
	ReasonHostIMEXNotReady = "HostIMEXNotReady"
)
