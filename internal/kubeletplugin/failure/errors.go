// Package failure classifies why a claim's prepare or unprepare failed: whether a retry of the
// kubelet can succeed (PermanentError, RetryableError), whether the claim's author can fix it
// (UserError, posted on the claim's pods), and the reason it is counted under in the metrics
// (Reason).
package failure

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

// Permanentf returns a PermanentError with a formatted message.
func Permanentf(format string, args ...any) error {
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

// Retryablef returns a RetryableError with a formatted message.
func Retryablef(format string, args ...any) error {
	return &RetryableError{Err: fmt.Errorf(format, args...)}
}

// IsRetryable reports whether err is, or wraps, a RetryableError.
func IsRetryable(err error) bool {
	var r *RetryableError
	return errors.As(err, &r)
}

// UserError marks a prepare failure that the claim's author can fix (the claim's ComputeDomain
// is missing, in another namespace or being deleted, its opaque config is missing, invalid or
// conflicting, the node serves another domain), as opposed to the node's or the operator's (NVML,
// the fabric, the driver root, a daemon not Ready yet). Its message is the wrapped error's; the
// plugin posts an event with Reason on each pod the claim is reserved for (the plugin's podEvents).
type UserError struct {
	// Reason is the events' reason: one of the Reason constants of pod events (user.go).
	Reason string
	// Domain names the claim's ComputeDomain, "<namespace>/<name>" or its UID; empty when the
	// claim names none that could be read.
	Domain string
	Err    error
}

func (e *UserError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *UserError) Unwrap() error { return e.Err }

// UserFixable tags err as a UserError with reason, keeping its message and whether it is
// permanent or retryable (the kubelet sees the same error); nil stays nil. The UserError goes
// inside the PermanentError or RetryableError that err is, so that its message (the pod events
// quote it) has no prefix. Pass a check's own error: where err only wraps a PermanentError or
// RetryableError (errors.As), what wraps it is dropped.
func UserFixable(err error, reason, domain string) error {
	var p *PermanentError
	var r *RetryableError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &p):
		return &PermanentError{Err: &UserError{Reason: reason, Domain: domain, Err: p.Err}}
	case errors.As(err, &r):
		return &RetryableError{Err: &UserError{Reason: reason, Domain: domain, Err: r.Err}}
	default:
		return &UserError{Reason: reason, Domain: domain, Err: err}
	}
}

// UserErrorOf returns the UserError err is or wraps; ok is false for a failure the claim's
// author cannot fix.
func UserErrorOf(err error) (ue *UserError, ok bool) {
	ok = errors.As(err, &ue)
	return ue, ok
}
