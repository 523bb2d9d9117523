// Package refusal marks the errors of safety checks: a command declined to act because acting
// would touch what is not its own (another plane's namespace, a release's object, live
// ComputeDomains). Nothing was changed, and retrying the same command will be refused again;
// the CLI exits with a code of its own for these, so that scripts can tell them from failures.
package refusal

import (
	"errors"
	"fmt"
)

// Error is a refusal. Its message is the wrapped error's.
type Error struct {
	err error
}

// Errorf formats a refusal as fmt.Errorf does (%w wraps).
func Errorf(format string, args ...any) error {
	return &Error{err: fmt.Errorf(format, args...)}
}

// Wrap marks err as a refusal; nil stays nil.
func Wrap(err error) error {
	if err == nil {
		return nil
	}
	return &Error{err: err}
}

func (e *Error) Error() string { return e.err.Error() }
func (e *Error) Unwrap() error { return e.err }

// Refusal marks e as a refusal for Is.
func (e *Error) Refusal() {}

// Is reports whether err is, or wraps, a refusal: an *Error or any error with a Refusal
// method (a type of its own that carries what was refused).
func Is(err error) bool {
	var r interface{ Refusal() }
	return errors.As(err, &r)
}
