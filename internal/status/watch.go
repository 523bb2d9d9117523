package status

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"
)

// DefaultInterval is how often --watch draws again.
const DefaultInterval = 2 * time.Second

// clearScreen moves the cursor home and clears a terminal.
const clearScreen = "\x1b[H\x1b[2J"

// WatchOptions shape Watch.
type WatchOptions struct {
	// Interval between draws (DefaultInterval when 0).
	Interval time.Duration
	// Clear clears the screen before each draw (a terminal); otherwise draws follow each other,
	// Separator between them.
	Clear     bool
	Separator string
}

// Watch draws into w now and then every interval until ctx ends, which is not an error. Each
// draw is rendered in full before it is written, so a screen never shows half of one. A failed
// first draw is returned; a later failure (a transient API error, say) is shown in place of the
// draw and the watch goes on.
func Watch(ctx context.Context, w io.Writer, opts WatchOptions, draw func(ctx context.Context, w io.Writer) error) error {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	t := time.NewTicker(opts.Interval)
	defer t.Stop()
	for first := true; ; first = false {
		var buf bytes.Buffer
		err := draw(ctx, &buf)
		if err != nil && ctx.Err() != nil {
			return nil // interrupted while drawing
		}
		if err != nil {
			if first {
				return err
			}
			buf.Reset()
			fmt.Fprintf(&buf, "%s: %v\n", time.Now().Format(time.TimeOnly), err)
		}
		prefix := ""
		switch {
		case opts.Clear:
			prefix = clearScreen
		case !first:
			prefix = opts.Separator
		}
		if _, err := io.WriteString(w, prefix+buf.String()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			// A tick that was already due when ctx ended may win the select: no draw after
			// an interrupt.
			if ctx.Err() != nil {
				return nil
			}
		}
	}
}
