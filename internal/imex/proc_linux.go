package imex

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel kill the child if the supervising process dies, so a
// crashed daemon never leaves an IMEX behind that would hold its ports.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
