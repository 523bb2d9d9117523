package nvml

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// ErrFabricNotReady is matched (errors.Is) by a [*NotReadyError]: fabric
// registration has not finished, so the clique is not known yet. Retry later.
var ErrFabricNotReady = errors.New("NVLink fabric registration not finished")

// ErrFabricFailed is matched (errors.Is) by a [*FabricError] and by a
// [*MismatchError]: the fabric info is bad and retrying will not help. Whether
// that is fatal is the caller's choice (CrashOnNVLinkFabricErrors).
var ErrFabricFailed = errors.New("NVLink fabric error")

// NotReadyError says a GPU's fabric registration has not started or is in progress.
type NotReadyError struct {
	// Index and UUID name the first GPU found not ready.
	Index int
	UUID  string
	// State is FabricStateNotStarted or FabricStateInProgress.
	State FabricState
}

func (e *NotReadyError) Error() string {
	return fmt.Sprintf("GPU %d (%s): %s (state %s); the clique is not known yet, retry later",
		e.Index, e.UUID, ErrFabricNotReady, e.State)
}

// Is makes errors.Is(err, ErrFabricNotReady) true.
func (e *NotReadyError) Is(target error) bool { return target == ErrFabricNotReady }

// FabricError says a GPU's fabric registration failed: it completed with a
// non-success status, or NVML reports a state this package does not know.
type FabricError struct {
	// Index and UUID name the GPU.
	Index int
	UUID  string
	// State and Status are the GPU's raw fabric state and status.
	State  FabricState
	Status FabricStatus
}

func (e *FabricError) Error() string {
	if e.State == FabricStateCompleted {
		return fmt.Sprintf("GPU %d (%s): NVLink fabric registration failed: state %s, status %s",
			e.Index, e.UUID, e.State, e.Status)
	}
	return fmt.Sprintf("GPU %d (%s): NVLink fabric in unknown state %s (status %s)",
		e.Index, e.UUID, e.State, e.Status)
}

// Is makes errors.Is(err, ErrFabricFailed) true.
func (e *FabricError) Is(target error) bool { return target == ErrFabricFailed }

// MismatchError says two GPUs of one node report different cliques. An empty
// clique id stands for a GPU without fabric.
type MismatchError struct {
	// First is the node's first GPU, FirstCliqueID its clique.
	First         GPU
	FirstCliqueID string
	// Second is the first GPU that disagrees with it, SecondCliqueID its clique.
	Second         GPU
	SecondCliqueID string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("GPUs of one node disagree on their NVLink clique: GPU %d (%s) is in %s, GPU %d (%s) is in %s",
		e.First.Index, e.First.UUID, describeCliqueID(e.FirstCliqueID),
		e.Second.Index, e.Second.UUID, describeCliqueID(e.SecondCliqueID))
}

// Is makes errors.Is(err, ErrFabricFailed) true.
func (e *MismatchError) Is(target error) bool { return target == ErrFabricFailed }

func describeCliqueID(id string) string {
	if id == "" {
		return "no clique (no fabric)"
	}
	return fmt.Sprintf("clique %q", id)
}

// DeriveCliqueID turns the GPUs' fabric readings into the node's clique id.
//
// A GPU without fabric (not supported, state NOT_SUPPORTED, or a zero cluster
// UUID after a successful registration) has the empty clique id; so has a node
// without GPUs. A GPU in state NOT_STARTED or IN_PROGRESS makes the result a
// [*NotReadyError]; COMPLETED with a non-success status, or an unknown state,
// a [*FabricError]. Failures win over not-ready GPUs, so that a broken GPU is
// reported rather than waited for. GPUs without fabric next to GPUs with one do
// not count (as NVIDIA's driver does: the node's clique is its fabric GPUs'),
// and the node is in no clique only when none of its GPUs has one. The GPUs with
// a clique must all have the same, or the result is a [*MismatchError] naming
// the first such GPU and the first one that disagrees with it.
func DeriveCliqueID(gpus []GPU) (string, error) {
	var notReady *NotReadyError
	ids := make([]string, len(gpus))
	for i, gpu := range gpus {
		id, err := gpuCliqueID(gpu)
		var nr *NotReadyError
		switch {
		case errors.As(err, &nr):
			if notReady == nil {
				notReady = nr
			}
		case err != nil:
			return "", err
		}
		ids[i] = id
	}
	if notReady != nil {
		return "", notReady
	}
	first := -1
	for i, id := range ids {
		switch {
		case id == "":
		case first < 0:
			first = i
		case id != ids[first]:
			return "", &MismatchError{First: gpus[first], FirstCliqueID: ids[first], Second: gpus[i], SecondCliqueID: id}
		}
	}
	if first < 0 {
		return "", nil
	}
	return ids[first], nil
}

// gpuCliqueID is the clique id of one GPU, "" without fabric.
func gpuCliqueID(gpu GPU) (string, error) {
	f := gpu.Fabric
	if !f.Supported {
		return "", nil
	}
	switch f.State {
	case FabricStateNotSupported:
		return "", nil
	case FabricStateNotStarted, FabricStateInProgress:
		return "", &NotReadyError{Index: gpu.Index, UUID: gpu.UUID, State: f.State}
	case FabricStateCompleted:
		if f.Status != FabricStatusSuccess {
			return "", &FabricError{Index: gpu.Index, UUID: gpu.UUID, State: f.State, Status: f.Status}
		}
		if f.ClusterUUID == ([16]byte{}) {
			return "", nil
		}
		return FormatCliqueID(f.ClusterUUID, f.CliqueID), nil
	default:
		return "", &FabricError{Index: gpu.Index, UUID: gpu.UUID, State: f.State, Status: f.Status}
	}
}

// FormatCliqueID returns "<clusterUUID>.<cliqueId>", the cluster UUID as a
// canonical lowercase UUID and the clique id in decimal.
func FormatCliqueID(clusterUUID [16]byte, cliqueID uint32) string {
	return fmt.Sprintf("%s.%d", FormatUUID(clusterUUID), cliqueID)
}

// FormatUUID writes 16 bytes as a canonical lowercase UUID (8-4-4-4-12).
func FormatUUID(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// ParseUUID reads a canonical UUID (8-4-4-4-12 hex digits, either case).
func ParseUUID(s string) ([16]byte, error) {
	var u [16]byte
	groups := strings.Split(s, "-")
	lengths := []int{8, 4, 4, 4, 12}
	if len(groups) != len(lengths) {
		return u, fmt.Errorf("invalid UUID %q: want 8-4-4-4-12 hex digits", s)
	}
	for i, g := range groups {
		if len(g) != lengths[i] {
			return u, fmt.Errorf("invalid UUID %q: want 8-4-4-4-12 hex digits", s)
		}
	}
	if _, err := hex.Decode(u[:], []byte(strings.Join(groups, ""))); err != nil {
		return [16]byte{}, fmt.Errorf("invalid UUID %q: %w", s, err)
	}
	return u, nil
}
