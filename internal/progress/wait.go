// Package progress waits for conditions while telling a user what it waits for.
package progress

import (
	"context"
	"fmt"
	"io"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// How often a status is printed: a changed one at most every changedEvery (a count climbing to
// thousands would otherwise print a line per poll), an unchanged one every unchangedEvery.
var changedEvery, unchangedEvery = 2 * time.Second, 10 * time.Second

// Wait polls cond every poll until it reports done, printing "Waiting for <what>" first, then
// cond's status when it changes (at most every 2s) and at least every 10s, then how long it took.
// It fails after timeout with the last status, or with cond's error. The polling is
// apimachinery's (wait.PollUntilContextTimeout, first poll at once); what is printed is this
// package's.
func Wait(ctx context.Context, out io.Writer, timeout, poll time.Duration, what string, cond func(context.Context) (done bool, status string, err error)) error {
	start := time.Now()
	fmt.Fprintf(out, "Waiting for %s\n", what)
	last, printed, printedAt := "", "", time.Time{}
	err := wait.PollUntilContextTimeout(ctx, poll, timeout, true, func(ctx context.Context) (bool, error) {
		done, status, err := cond(ctx)
		if err != nil && ctx.Err() == nil {
			return false, fmt.Errorf("waiting for %s: %w", what, err)
		}
		if done {
			return true, nil
		}
		if status != "" {
			last = status
			since := time.Since(printedAt)
			if (status != printed && since >= changedEvery) || since >= unchangedEvery {
				fmt.Fprintf(out, "  %s (%s)\n", status, time.Since(start).Round(time.Second))
				printed, printedAt = status, time.Now()
			}
		}
		return false, nil
	})
	switch {
	case err == nil:
		fmt.Fprintf(out, "  done after %s\n", time.Since(start).Round(time.Second))
		return nil
	case ctx.Err() != nil:
		// Interrupted (a signal, a caller's deadline), not this wait's own timeout.
		return fmt.Errorf("stopped after %s waiting for %s: %w (last: %s)", time.Since(start).Round(time.Second), what, context.Cause(ctx), last)
	case wait.Interrupted(err):
		return fmt.Errorf("timed out after %s waiting for %s (last: %s)", timeout, what, last)
	}
	return err
}
