package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"cdplane/internal/imex"
)

// Check is the readiness probe: it succeeds on a node without a fabric, and otherwise when IMEX
// answers its readiness query that it is ready. When the daemon found that IMEX cannot run on
// this node (Config.BlockedPath) it fails with that reason, which the kubelet shows on the pod.
func Check(ctx context.Context, cfg Config, x imex.Interface) error {
	if cfg.CliqueID == "" {
		return nil
	}
	if data, err := os.ReadFile(cfg.BlockedPath()); err == nil {
		return fmt.Errorf("IMEX cannot run on this node: %s", strings.TrimSpace(string(data)))
	}
	ctx, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	if err := x.Ready(ctx); err != nil {
		if errors.Is(err, imex.ErrNotReady) {
			return err // it says so already: "IMEX is not ready: <its answer>"
		}
		return fmt.Errorf("IMEX is not ready: asking it: %w", err)
	}
	return nil
}
