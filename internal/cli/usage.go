package cli

import "errors"

// Exit codes of Main, as kubectl-style scripts expect them: 0 done, 1 failed, 2 the command
// line was wrong (nothing was read or changed), 3 a safety check refused (nothing was changed;
// the same command would be refused again).
const (
	exitOK      = 0
	exitError   = 1
	exitUsage   = 2
	exitRefused = 3
)

// usageError is a mistake in the command line: an unknown command or flag, a bad flag value,
// the wrong arguments, flags that contradict each other. Commands find these before they
// contact a cluster.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usage marks err as a usage error; nil stays nil.
func usage(err error) error {
	if err == nil {
		return nil
	}
	return &usageError{err: err}
}

// isUsage reports whether err is, or wraps, a usage error.
func isUsage(err error) bool {
	var u *usageError
	return errors.As(err, &u)
}
