package status

import (
	"io"
	"os"
)

// ColorFor reports whether text written to w should be coloured: only when w is a terminal
// (a character device) and $NO_COLOR is unset or empty (https://no-color.org).
func ColorFor(w io.Writer) bool {
	if os.Getenv("NO_COLOR") != "" {
		return false
	}
	return IsTerminal(w)
}

// IsTerminal reports whether w is a file that is a character device (a terminal).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
