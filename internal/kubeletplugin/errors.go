package kubeletplugin

import (
	"errors"
	"fmt"
)

// PermanentError is an error that retrying the same claim cannot fix: a bad opaque config, a
// claim in the wrong namespace. The kubelet sees its message with the prefix "permanent error: ".
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent error: " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *PermanentError) Unwrap() error { return e.Err }

// permanentf returns a PermanentError with a formatted message.
func permanentf(format string, args ...any) error {
	return &PermanentError{Err: fmt.Errorf(format, args...)}
}

// IsPermanent reports whether err is, or wraps, a PermanentError.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// RetryableError is an error that goes away with time: the node's daemon is not Ready yet, the
// node still serves another domain, the clique is not known yet. The kubelet retries the claim;
// its message carries the prefix "retryable error: ".
type RetryableError struct{ Err error }

func (e *RetryableError) Error() string { return "retryable error: " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *RetryableError) Unwrap() error { return e.Err }

func retryablef(format string, args ...any) error {
	return &RetryableError{Err: fmt.Errorf(format, args...)}
}

// IsRetryable reports whether err is, or wraps, a RetryableError.
func IsRetryable(err error) bool {
	var r *RetryableError
	return errors.As(err, &r)
}
