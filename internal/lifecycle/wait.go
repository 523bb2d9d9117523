package lifecycle

import (
	"context"
	"fmt"
	"time"
)

// waitFor polls cond until it reports done, printing its status when it changes and at least
// every 10 seconds, within the manager's timeout.
func (m *Manager) waitFor(ctx context.Context, what string, cond func(context.Context) (done bool, status string, err error)) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, m.opts.Timeout)
	defer cancel()
	m.progress("Waiting for %s", what)
	last, lastAt := "", time.Time{}
	for {
		done, status, err := cond(ctx)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if done {
			m.progress("  done after %s", since(start))
			return nil
		}
		if status != "" && (status != last || time.Since(lastAt) >= 10*time.Second) {
			m.progress("  %s (%s)", status, since(start))
			last, lastAt = status, time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out after %s waiting for %s (last: %s)", m.opts.Timeout, what, last)
		case <-time.After(m.opts.Poll):
		}
	}
}
