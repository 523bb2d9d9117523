package devices

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"cdplane/internal/kubeletplugin/failure"
	"cdplane/internal/nvml"
)

// CliqueTracker keeps the node's clique as last discovered through NVML (real or simulated),
// the same discovery the daemon uses.
type CliqueTracker struct {
	disc nvml.Discoverer
	// crash makes a fabric failure fatal (feature gate CrashOnNVLinkFabricErrors).
	crash bool

	// onBlock, when set, is called from refresh when the reason the node cannot serve changes
	// (see BlockReason): with the new reason ("" once it serves) and the discovery's error.
	onBlock func(reason string, err error)

	mu    sync.RWMutex
	id    string
	err   error
	known bool
	// block is the reason of the last discovery (BlockReason), blockErr its error.
	block    string
	blockErr error
}

// NewCliqueTracker returns the tracker of the clique disc discovers; crash makes a fabric
// failure fatal (feature gate CrashOnNVLinkFabricErrors).
func NewCliqueTracker(disc nvml.Discoverer, crash bool) *CliqueTracker {
	return &CliqueTracker{disc: disc, crash: crash}
}

// SetOnBlock sets the callback Refresh calls when the reason the node cannot serve changes.
func (t *CliqueTracker) SetOnBlock(onBlock func(reason string, err error)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onBlock = onBlock
}

// Why a node cannot serve ComputeDomains: the classes of a failed discovery.
const (
	BlockNone           = ""
	BlockNVML           = ReasonNVMLUnavailable
	BlockFabricNotReady = ReasonFabricNotReady
	BlockFabricFailed   = ReasonFabricFailed
	BlockOther          = ReasonDiscoveryFailed
)

// BlockReason classifies a discovery's error: "" when it succeeded.
func BlockReason(err error) string {
	switch {
	case err == nil:
		return BlockNone
	case errors.Is(err, nvml.ErrNVMLUnavailable):
		return BlockNVML
	case errors.Is(err, nvml.ErrFabricNotReady):
		return BlockFabricNotReady
	case errors.Is(err, nvml.ErrFabricFailed):
		return BlockFabricFailed
	}
	return BlockOther
}

// NVMLAvailable reports whether the last discovery could load NVML (a fabric error or an
// unfinished registration still counts as available: the node has GPUs).
func (t *CliqueTracker) NVMLAvailable() bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.block != BlockNVML
}

// Blocked returns why the node cannot serve fully ("" when it can; BlockFabricFailed: it serves
// as a node without a fabric) and the discovery's error.
func (t *CliqueTracker) Blocked() (string, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.block, t.blockErr
}

// Refresh discovers the clique once. It returns an error only when it is fatal: a fabric
// failure with crash set. Other failures are kept and reported by current.
func (t *CliqueTracker) Refresh(ctx context.Context) (changed bool, fatal error) {
	res, err := t.disc.Discover(ctx)
	block, reported := BlockReason(err), err
	if block == BlockFabricFailed && !t.crash {
		// As NVIDIA's driver with CrashOnNVLinkFabricErrors off: the node serves as one without
		// a fabric (empty clique); the reason stays, so that the node says so.
		res, err = nvml.Result{}, nil
	}
	t.mu.Lock()
	flipped, onBlock := block != t.block, t.onBlock
	t.block, t.blockErr = block, reported
	if err != nil {
		t.err = err
	} else {
		changed = !t.known || t.id != res.CliqueID
		t.id, t.err, t.known = res.CliqueID, nil, true
	}
	t.mu.Unlock()
	// Outside the lock: the callback publishes, which reads the tracker.
	if flipped && onBlock != nil {
		onBlock(block, reported)
	}
	if t.crash && block == BlockFabricFailed {
		return false, fmt.Errorf("NVLink fabric error (CrashOnNVLinkFabricErrors is on): %w", err)
	}
	return changed, nil
}

// Current returns the clique id ("" without fabric), or a retryable error while it is not
// known: registration not finished, NVML unavailable, a fabric error the operator must fix.
func (t *CliqueTracker) Current() (string, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.err != nil {
		return "", failure.Retryablef("the node's NVLink clique is not known: %w", t.err)
	}
	if !t.known {
		return "", failure.Retryablef("the node's NVLink clique has not been discovered yet")
	}
	return t.id, nil
}

// Run refreshes the clique every period until ctx ends, calling onChange after each change
// and fatal on a fatal error (after which it stops).
func (t *CliqueTracker) Run(ctx context.Context, period time.Duration, onChange func(string), fatal func(error)) {
	logger := log.FromContext(ctx)
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		changed, err := t.Refresh(ctx)
		if err != nil {
			fatal(err)
			return
		}
		id, cur := t.Current()
		switch {
		case cur != nil:
			logger.Error(cur, "Clique discovery failed")
		case changed:
			logger.Info("Node clique changed", "cliqueID", id)
			onChange(id)
		}
	}
}
