// Package nvml discovers which NVLink clique a node belongs to.
//
// A node's clique id is "<clusterUUID>.<cliqueId>", read from NVML's GPU fabric
// info; every GPU on the node must agree. The real backend (package nvmlreal)
// reads NVML through go-nvml behind [Discoverer]; a simulated one (the
// simulated cluster's) implements the same interface. Every backend feeds its
// readings through [DeriveCliqueID], so all yield the same ids and errors:
//
//   - "" (no fabric): no GPUs, fabric info not supported, or a zero cluster UUID.
//   - [ErrFabricNotReady] ([*NotReadyError]): registration not started or in
//     progress; retry later, the node is not ready.
//   - [ErrFabricFailed] ([*FabricError], [*MismatchError]): registration failed,
//     a bad fabric status, an unknown state, or GPUs that disagree. The caller
//     decides whether that is fatal (feature gate CrashOnNVLinkFabricErrors).
//   - [ErrNVMLUnavailable]: NVML cannot be loaded or initialised.
package nvml

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// BackendNVML names the real backend in [Result.Backend].
const BackendNVML = "nvml"

// DefaultLibraryPath is the NVML library the real backend loads when
// [Options.LibraryPath] is empty.
const DefaultLibraryPath = "libnvidia-ml.so.1"

// Discoverer reads a node's GPUs and derives the node's clique id.
type Discoverer interface {
	// Discover reads every GPU of the node and derives the clique id. On a
	// fabric error (not ready, failed, GPUs disagreeing) the Result still holds
	// the GPUs read, so that they can be shown; its CliqueID is then empty and
	// means nothing.
	Discover(ctx context.Context) (Result, error)
}

// Result is what a Discoverer found on a node.
type Result struct {
	// Backend is the backend that produced the result (BackendNVML for the real one).
	Backend string
	// GPUs are the node's GPUs, in NVML index order.
	GPUs []GPU
	// CliqueID is "<clusterUUID>.<cliqueId>", or "" when the node has no fabric.
	CliqueID string
}

// GPU is one GPU's identity and its raw fabric reading.
type GPU struct {
	// Index is the NVML device index.
	Index int
	// UUID is the GPU UUID, "GPU-…".
	UUID string
	// Fabric is the GPU's fabric info as NVML reported it.
	Fabric FabricInfo
}

// FabricInfo is the raw fabric info of one GPU (nvmlGpuFabricInfo_t).
type FabricInfo struct {
	// Supported is false when NVML answered ERROR_NOT_SUPPORTED for the fabric
	// info call (or the driver predates it); the other fields are then zero.
	Supported bool
	// State is the fabric registration state.
	State FabricState
	// Status is the registration's NVML return code; it is meaningful only
	// once State is FabricStateCompleted.
	Status FabricStatus
	// ClusterUUID identifies the NVLink domain; all zero means no fabric.
	ClusterUUID [16]byte
	// CliqueID identifies the partition within the NVLink domain.
	CliqueID uint32
}

// FabricState is NVML's fabric registration state (nvmlGpuFabricState_t).
type FabricState uint8

// Fabric states, with NVML's values.
const (
	FabricStateNotSupported FabricState = 0
	FabricStateNotStarted   FabricState = 1
	FabricStateInProgress   FabricState = 2
	FabricStateCompleted    FabricState = 3
)

var fabricStateNames = map[FabricState]string{
	FabricStateNotSupported: "NOT_SUPPORTED",
	FabricStateNotStarted:   "NOT_STARTED",
	FabricStateInProgress:   "IN_PROGRESS",
	FabricStateCompleted:    "COMPLETED",
}

// String returns NVML's name of the state, without the GPU_FABRIC_STATE_ prefix.
func (s FabricState) String() string {
	if name, ok := fabricStateNames[s]; ok {
		return name
	}
	return fmt.Sprintf("UNKNOWN(%d)", uint8(s))
}

// MarshalText writes the state's name, so that specs read as words.
func (s FabricState) MarshalText() ([]byte, error) {
	if _, ok := fabricStateNames[s]; !ok {
		return nil, fmt.Errorf("unknown fabric state %d", uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText reads a state name: "COMPLETED", "completed", "in-progress",
// "GPU_FABRIC_STATE_NOT_STARTED" and the like.
func (s *FabricState) UnmarshalText(text []byte) error {
	name := strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(string(text)), "-", "_"))
	name = strings.TrimPrefix(name, "GPU_FABRIC_STATE_")
	for state, known := range fabricStateNames {
		if name == known {
			*s = state
			return nil
		}
	}
	return fmt.Errorf("unknown fabric state %q (want one of NOT_SUPPORTED, NOT_STARTED, IN_PROGRESS, COMPLETED)", string(text))
}

// New returns the real NVML backend reading the library at libraryPath
// (DefaultLibraryPath when empty). An error wrapping ErrNVMLUnavailable says
// the library cannot be used in this binary or on this node.
func New(libraryPath string) (Discoverer, error) {
	return newNVML(libraryPath)
}

// RealBackend is the real NVML backend, registered by package nvmlreal (imported for its side
// effect by the binaries that run on GPU nodes: the kubelet plugin, the daemon and cdplane-nvml).
// It lives apart so that binaries which never touch real GPUs (the cdplane CLI, whose Helm
// template engine's use of reflection would keep every go-nvml binding linked) do not link
// go-nvml's C symbols at all.
type RealBackend struct {
	// New returns the discoverer reading the library at a path (DefaultLibraryPath when empty).
	New func(libraryPath string) (Discoverer, error)
	// Probe loads and unloads the library at path to learn whether it is there.
	Probe func(path string) error
}

var realBackend *RealBackend

// RegisterRealBackend makes the real backend available to [New]; a zero RealBackend removes it.
func RegisterRealBackend(b RealBackend) {
	if b.New == nil {
		realBackend = nil
		return
	}
	realBackend = &b
}

func newNVML(libraryPath string) (Discoverer, error) {
	if realBackend == nil {
		return nil, errNoRealBackend()
	}
	return realBackend.New(libraryPath)
}

func errNoRealBackend() error {
	return fmt.Errorf("%w: this binary has no real NVML backend (cdplane-kubelet-plugin, cdplane-daemon and cdplane-nvml do)", ErrNVMLUnavailable)
}

// LibraryPathOrDefault returns path, or DefaultLibraryPath when it is empty.
func LibraryPathOrDefault(path string) string {
	return libraryPathOrDefault(path)
}

func libraryPathOrDefault(path string) string {
	if path == "" {
		return DefaultLibraryPath
	}
	return path
}

// ErrNVMLUnavailable is wrapped by every error that says NVML could not be
// loaded or initialised; it is not a fabric error.
var ErrNVMLUnavailable = errors.New("NVML cannot be initialised")
