package daemon

import (
	"context"
	"fmt"
	"time"

	"cdplane/internal/imex"
)

// Check is the readiness probe: it succeeds on a node without a fabric, and otherwise when IMEX
// answers its readiness query that it is ready.
func Check(ctx context.Context, cfg Config, x imex.Interface) error {
	if cfg.CliqueID == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	if err := x.Ready(ctx); err != nil {
		return fmt.Errorf("IMEX is not ready: %w", err)
	}
	return nil
}
