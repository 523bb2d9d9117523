package lifecycle

import (
	"context"

	"cdplane/internal/progress"
)

// waitFor waits for cond within the manager's timeout, showing progress on its output.
func (m *Manager) waitFor(ctx context.Context, what string, cond func(context.Context) (done bool, status string, err error)) error {
	return progress.Wait(ctx, m.out, m.opts.Timeout, m.opts.Poll, what, cond)
}
