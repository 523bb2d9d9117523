package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"
)

// Format is a layout of a checkpoint file that Decode reads.
type Format string

// The formats Decode reads: this plugin's, by version, and each of NVIDIA's (nvidia.go).
const (
	FormatV1         Format = "v1"
	FormatNVIDIAV1RC Format = "nvidia-" + Format(nvidiaV1RC)
	FormatNVIDIAV1   Format = "nvidia-" + Format(nvidiaV1)
	FormatNVIDIAV2   Format = "nvidia-" + Format(nvidiaV2)
)

// Decoded is a checkpoint file as Decode read it.
type Decoded struct {
	// Format is the file's layout.
	Format Format
	// Checkpoint holds its claims in this plugin's current version; for NVIDIA's format, as
	// converted (before Open's check of the boot id).
	Checkpoint Checkpoint
	// nvidia is what NVIDIA's checkpoint says besides its claims; nil for this plugin's.
	nvidia *nvidiaCheckpoint
}

// versions are the decoders of this plugin's format, by version: each returns the checkpoint in
// the current version (Version). A new version adds its decoder here, and the decoders of the
// older ones convert what they read.
var versions = map[int]struct {
	format Format
	decode func(data []byte) (Checkpoint, error)
}{
	1: {FormatV1, decodeV1},
}

// Decode is the one decoder of checkpoint files: it tells the formats apart by their top-level
// fields and dispatches. A top-level version is this plugin's format, decoded by that version's
// decoder (versions); a top-level checksum without one is NVIDIA's, whose claims are converted
// (every layout it has written, nvidia.go). A file neither can read, or of a version no decoder
// knows, is an *UnreadableCheckpointError.
func Decode(path string, data []byte) (Decoded, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return Decoded{}, &UnreadableCheckpointError{Path: path, Err: fmt.Errorf("is corrupt: %w", err)}
	}
	if raw, ok := top["version"]; ok {
		var version int
		if err := json.Unmarshal(raw, &version); err != nil {
			return Decoded{}, &UnreadableCheckpointError{Path: path, Err: fmt.Errorf("is corrupt: %w", err)}
		}
		v, ok := versions[version]
		if !ok {
			return Decoded{}, &UnreadableCheckpointError{Path: path,
				Err: fmt.Errorf("has version %d, this plugin reads version %s", version, readableVersions())}
		}
		cp, err := v.decode(data)
		if err != nil {
			return Decoded{}, &UnreadableCheckpointError{Path: path, Err: fmt.Errorf("is corrupt: %w", err)}
		}
		return Decoded{Format: v.format, Checkpoint: cp}, nil
	}
	if _, ok := top["checksum"]; ok {
		nv, err := decodeNVIDIACheckpoint(data, top)
		if err != nil {
			return Decoded{}, &UnreadableCheckpointError{Path: path, Err: fmt.Errorf("is NVIDIA's checkpoint, but %w", err)}
		}
		return Decoded{Format: "nvidia-" + Format(nv.Format), Checkpoint: Checkpoint{Version: Version, Claims: nv.Claims}, nvidia: nv}, nil
	}
	return Decoded{}, &UnreadableCheckpointError{Path: path,
		Err: errors.New("is neither this plugin's checkpoint (it has no version) nor NVIDIA's (it has no checksum)")}
}

// readableVersions lists the versions Decode reads, "1" or "1, 2".
func readableVersions() string {
	var vs []int
	for v := range versions {
		vs = append(vs, v)
	}
	slices.Sort(vs)
	out := ""
	for i, v := range vs {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprint(v)
	}
	return out
}

// decodeV1 decodes version 1, the current version.
func decodeV1(data []byte) (Checkpoint, error) {
	var cp Checkpoint
	if err := json.Unmarshal(data, &cp); err != nil {
		return Checkpoint{}, err
	}
	if cp.Claims == nil {
		cp.Claims = map[types.UID]ClaimEntry{}
	}
	return cp, nil
}
