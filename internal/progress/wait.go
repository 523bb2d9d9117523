// Package progress waits for conditions while telling a user what it waits for.
package progress

import (
	"context"
	"fmt"
	"io"
	"time"
)

// Wait polls cond every poll until it reports done, printing "Waiting for <what>" first, then
// cond's status when it changes and at least every 10 seconds, then how long it took. It fails
// after timeout with the last status, or with cond's error.
func Wait(ctx context.Context, out io.Writer, timeout, poll time.Duration, what string, cond func(context.Context) (done bool, status string, err error)) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	fmt.Fprintf(out, "Waiting for %s\n", what)
	last, lastAt := "", time.Time{}
	for {
		done, status, err := cond(ctx)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if done {
			fmt.Fprintf(out, "  done after %s\n", time.Since(start).Round(time.Second))
			return nil
		}
		if status != "" && (status != last || time.Since(lastAt) >= 10*time.Second) {
			fmt.Fprintf(out, "  %s (%s)\n", status, time.Since(start).Round(time.Second))
			last, lastAt = status, time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out after %s waiting for %s (last: %s)", timeout, what, last)
		case <-time.After(poll):
		}
	}
}
