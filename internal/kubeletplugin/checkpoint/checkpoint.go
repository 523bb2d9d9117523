// Package checkpoint is the kubelet plugin's record of its claims (Store), written atomically
// before each change is acted on, and the one decoder of checkpoint files (Decode): this
// plugin's format by version, and the checkpoint of NVIDIA's compute-domain kubelet plugin, which
// the plugin takes over where it replaces it (Opener).
package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"cdplane/internal/atomicfile"
	"cdplane/internal/kubeletplugin/failure"
)

// ClaimState is where a claim's preparation stands.
type ClaimState string

const (
	// PrepareStarted is written before the first change a prepare makes (node label, files).
	PrepareStarted ClaimState = "PrepareStarted"
	// PrepareCompleted is written once the claim's CDI devices are in place.
	PrepareCompleted ClaimState = "PrepareCompleted"
	// PrepareAborted marks a claim that was PrepareStarted when the plugin stopped and whose
	// ResourceClaim was gone when it started again: its changes were undone.
	PrepareAborted ClaimState = "PrepareAborted"
)

// Version is the version of the checkpoint file format.
const Version = 1

// File is the checkpoint's file name in the state directory.
const File = "checkpoint.json"

// Checkpoint is the state of every claim the plugin knows, as stored on disk.
type Checkpoint struct {
	Version int                      `json:"version"`
	Claims  map[types.UID]ClaimEntry `json:"claims"`
}

// ClaimEntry is one claim's state.
type ClaimEntry struct {
	State     ClaimState `json:"state"`
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	// Kind is "channel" or "daemon".
	Kind string `json:"kind"`
	// DomainID is the UID of the claim's ComputeDomain.
	DomainID string `json:"domainID"`
	// CDISpec is the name of the claim's CDI spec file, empty when none was written.
	CDISpec string `json:"cdiSpec,omitempty"`
	// Devices are what prepare returned, given back as they were when the kubelet asks again.
	Devices []PreparedDevice `json:"devices,omitempty"`
}

// PreparedDevice is one prepared device as returned to the kubelet.
type PreparedDevice struct {
	Requests     []string `json:"requests"`
	Pool         string   `json:"pool"`
	Device       string   `json:"device"`
	CDIDeviceIDs []string `json:"cdiDeviceIDs,omitempty"`
}

// Store keeps the checkpoint in memory and on disk; every change is written through,
// atomically, before it is acted on.
type Store struct {
	path string
	mu   sync.Mutex
	cp   Checkpoint
}

// Open opens the checkpoint in dir as the plugin does (see Opener.Open),
// logging to the process's logger.
func Open(dir string) (*Store, error) {
	return NewOpener().Open(context.Background(), dir)
}

// UnreadableCheckpointError says why a checkpoint file cannot be used at all: it is not JSON, it
// fails its checksum, or it has a version no reader here knows. It is permanent: reading the same
// file again gives the same answer.
type UnreadableCheckpointError struct {
	// Path is the file.
	Path string
	// Err says what is wrong with it.
	Err error
}

func (e *UnreadableCheckpointError) Error() string {
	return fmt.Sprintf("checkpoint %s %v", e.Path, e.Err)
}

// Unwrap returns what is wrong with the file.
func (e *UnreadableCheckpointError) Unwrap() error { return e.Err }

// emptyCheckpoint is the checkpoint of a plugin that has prepared nothing.
func emptyCheckpoint() Checkpoint {
	return Checkpoint{Version: Version, Claims: map[types.UID]ClaimEntry{}}
}

// Read reads a checkpoint file in this plugin's format (any version Decode reads, converted to
// the current one); a missing file is an empty checkpoint. A file that is not that format (NVIDIA's
// too: only the plugin's start takes it over) is an *UnreadableCheckpointError. The plugin opens
// its checkpoint with Open, which also takes over NVIDIA's checkpoint and sets unreadable files
// aside.
func Read(path string) (Checkpoint, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return emptyCheckpoint(), nil
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("reading checkpoint: %w", err)
	}
	d, err := Decode(path, data)
	if err != nil {
		return Checkpoint{}, err
	}
	if d.nvidia != nil {
		return Checkpoint{}, &UnreadableCheckpointError{Path: path,
			Err: fmt.Errorf("is NVIDIA's checkpoint (%s), which the plugin takes over when it starts, not this plugin's", d.Format)}
	}
	return d.Checkpoint, nil
}

// Get returns a claim's entry.
func (s *Store) Get(uid types.UID) (ClaimEntry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.cp.Claims[uid]
	return e, ok
}

// Snapshot returns a copy of all entries.
func (s *Store) Snapshot() map[types.UID]ClaimEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[types.UID]ClaimEntry, len(s.cp.Claims))
	for k, v := range s.cp.Claims {
		out[k] = v
	}
	return out
}

// Put stores a claim's entry and writes the checkpoint; on a write error the memory copy is left
// as it was.
func (s *Store) Put(uid types.UID, e ClaimEntry) error {
	return s.update(func(claims map[types.UID]ClaimEntry) { claims[uid] = e })
}

// Remove drops a claim's entry and writes the checkpoint.
func (s *Store) Remove(uid types.UID) error {
	return s.update(func(claims map[types.UID]ClaimEntry) { delete(claims, uid) })
}

func (s *Store) update(change func(map[types.UID]ClaimEntry)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := Checkpoint{Version: Version, Claims: make(map[types.UID]ClaimEntry, len(s.cp.Claims)+1)}
	for k, v := range s.cp.Claims {
		next.Claims[k] = v
	}
	change(next.Claims)
	if err := write(s.path, next); err != nil {
		return failure.Tag(failure.Checkpoint, err)
	}
	s.cp = next
	return nil
}

// write replaces the file at path with cp, atomically.
func write(path string, cp Checkpoint) error {
	data, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding checkpoint: %w", err)
	}
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return fmt.Errorf("writing checkpoint: %w", err)
	}
	return nil
}
