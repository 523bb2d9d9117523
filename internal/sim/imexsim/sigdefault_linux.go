//go:build linux

package imexsim

import (
	"fmt"
	"os/signal"
	"syscall"
	"unsafe"
)

// defaultSignalAction gives sig its default action (SIG_DFL) until the next signal.Notify for
// it. The Go runtime catches every signal and drops SIGUSR1 and SIGUSR2 unless told to deliver
// them, so a Go program cannot otherwise die of them as a C program does.
func defaultSignalAction(sig syscall.Signal) error {
	// Ignore first: the runtime then stops handling sig and installs its handler again on the
	// next Notify (it would keep its handler, and drop the signal, across a Reset).
	signal.Ignore(sig)
	// The kernel's struct sigaction, zeroed: sa_handler SIG_DFL, no flags, an empty mask. 32
	// bytes cover it on every 64-bit architecture; the last argument is the size of the mask.
	var act [4]uint64
	_, _, errno := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
	if errno != 0 {
		return fmt.Errorf("restoring the default action of %v: %w", sig, errno)
	}
	return nil
}
