package status

import (
	"io"
	"os"

	"golang.org/x/term"
)

// ColorFor reports whether text written to w should be coloured: only when w is a terminal
// (a character device) and $NO_COLOR is unset or empty (https://no-color.org).
func ColorFor(w io.Writer) bool {
	if os.Getenv("NO_COLOR") != "" {
		return false
	}
	return IsTerminal(w)
}

// IsTerminal reports whether w is a terminal: a file the terminal ioctls answer for. A character
// device is not enough: /dev/null is one, and output sent there (a cron job, `> /dev/null`)
// must get no colours or screen clearing.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
