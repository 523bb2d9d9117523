package kubeletplugin

import (
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"cdplane/internal/kubeletplugin/cdi"
	"cdplane/internal/kubeletplugin/checkpoint"
	"cdplane/internal/kubeletplugin/claims"
	"cdplane/internal/kubeletplugin/devices"
	"cdplane/internal/kubeletplugin/endpoints"
	"cdplane/internal/kubeletplugin/failure"
)

// The plugin's names its users read (its command, the simulator, the benchmark, the tests),
// each defined in the subpackage of its concern and named here too, so that they import the
// plugin alone.

// Devices and attributes the plugin publishes (package devices).
const (
	MaxChannels           = devices.MaxChannels
	DefaultNumChannels    = devices.DefaultNumChannels
	DaemonDeviceName      = devices.DaemonDeviceName
	MaxDevicesPerSlice    = devices.MaxDevicesPerSlice
	AttributeControlPlane = devices.AttributeControlPlane
	KindDaemon            = devices.KindDaemon
	DriverVersionFile     = devices.DriverVersionFile
)

// Reasons of the events about the node (package devices).
const (
	ReasonNVMLUnavailable      = devices.ReasonNVMLUnavailable
	ReasonFabricNotReady       = devices.ReasonFabricNotReady
	ReasonFabricFailed         = devices.ReasonFabricFailed
	ReasonDevicesPublished     = devices.ReasonDevicesPublished
	ReasonDriverRootIncomplete = devices.ReasonDriverRootIncomplete
	ReasonDriverRootMismatch   = devices.ReasonDriverRootMismatch
	ReasonDriverTooOld         = devices.ReasonDriverTooOld
	ReasonHostIMEXNotReady     = devices.ReasonHostIMEXNotReady
)

// Reasons of the events on the pods of a claim that fails for a reason its author can fix
// (package failure).
const (
	ReasonComputeDomainNotFound          = failure.ReasonComputeDomainNotFound
	ReasonComputeDomainInOtherNamespace  = failure.ReasonComputeDomainInOtherNamespace
	ReasonComputeDomainDeleting          = failure.ReasonComputeDomainDeleting
	ReasonComputeDomainConfigMissing     = failure.ReasonComputeDomainConfigMissing
	ReasonInvalidComputeDomainConfig     = failure.ReasonInvalidComputeDomainConfig
	ReasonConflictingComputeDomainConfig = failure.ReasonConflictingComputeDomainConfig
	ReasonNodeServesOtherComputeDomain   = failure.ReasonNodeServesOtherComputeDomain
)

// Checkpoint is the record of the node's claims (package checkpoint).
type Checkpoint = checkpoint.Checkpoint

// ClaimEntry is one claim's record (package checkpoint).
type ClaimEntry = checkpoint.ClaimEntry

// ClaimState is where a claim's preparation stands (package checkpoint).
type ClaimState = checkpoint.ClaimState

// The checkpoint's file name and the states of its claims (package checkpoint).
const (
	CheckpointFile   = checkpoint.File
	PrepareStarted   = checkpoint.PrepareStarted
	PrepareCompleted = checkpoint.PrepareCompleted
	PrepareAborted   = checkpoint.PrepareAborted
)

// ReadCheckpoint is checkpoint.Read.
func ReadCheckpoint(path string) (Checkpoint, error) { return checkpoint.Read(path) }

// Where the metrics endpoint serves, and the health service's name the probes ask (package
// endpoints).
const (
	MetricsPath           = endpoints.MetricsPath
	HealthServiceLiveness = endpoints.HealthServiceLiveness
)

// IMEXConfigTemplateFile is the IMEX config template a daemon claim's config directory holds
// (package claims).
const IMEXConfigTemplateFile = claims.IMEXConfigTemplateFile

// CDIKind is the CDI kind of the claims' specs (package cdi).
const CDIKind = cdi.Kind

// CDISpecName is cdi.SpecName.
func CDISpecName(claimUID types.UID) string { return cdi.SpecName(claimUID) }

// ChannelDeviceName is devices.ChannelDeviceName.
func ChannelDeviceName(n int) string { return devices.ChannelDeviceName(n) }

// Devices is devices.Devices.
func Devices(numChannels int, controlPlane string, withDaemon bool) []resourcev1.Device {
	return devices.Devices(numChannels, controlPlane, withDaemon)
}

// SplitSlices is devices.SplitSlices.
func SplitSlices(devs []resourcev1.Device, perSlice int) []resourceslice.Slice {
	return devices.SplitSlices(devs, perSlice)
}

// NodeResources is devices.NodeResources.
func NodeResources(nodeName string, numChannels int, controlPlane string, withDaemon bool) resourceslice.DriverResources {
	return devices.NodeResources(nodeName, numChannels, controlPlane, withDaemon)
}

// KernelDriverVersion is devices.KernelDriverVersion.
func KernelDriverVersion(data []byte) (string, bool) { return devices.KernelDriverVersion(data) }

// ParseCapabilityMinor is devices.ParseCapabilityMinor.
func ParseCapabilityMinor(data []byte) (int64, error) { return devices.ParseCapabilityMinor(data) }
