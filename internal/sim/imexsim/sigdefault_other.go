//go:build !linux

package imexsim

import (
	"errors"
	"fmt"
	"syscall"
)

// defaultSignalAction is supported on Linux only: elsewhere the Go runtime keeps dropping sig
// until it is notified.
func defaultSignalAction(sig syscall.Signal) error {
	return fmt.Errorf("restoring the default action of %v: %w", sig, errors.ErrUnsupported)
}
