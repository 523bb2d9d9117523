package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// envLowered is set in the copy of a command that runs in a session of its own at a lowered
// CPU priority (runLowered): its value is the nice value that copy gives its session.
const envLowered = "CDPLANE_LOWERED_NICE"

// exitCode is the error of a command whose work was done by a child process that has already
// said what went wrong: Main exits with the code and prints nothing more.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// argsKey carries the command line Main was given in the commands' context, for a command
// that runs itself again (runLowered).
type argsKey struct{}

// commandArgs returns the arguments Main was given (without the program's name).
func commandArgs(ctx context.Context) []string {
	args, _ := ctx.Value(argsKey{}).([]string)
	return args
}

// loweredCopy reports whether this process is the copy runLowered started, which lowers its
// own session instead of starting another copy.
func loweredCopy() bool { return os.Getenv(envLowered) != "" }

// runLowered runs argv (this binary and its arguments, again) in a session of its own with
// envLowered=nice, so that it can lower the CPU priority of its session's scheduling group
// (lowerSession) without lowering the caller's: Linux schedules each session as an autogroup
// of its own, and a process started from a terminal shares the terminal's. The child's
// standard streams are this command's. An interrupt of this process (ctx ends) is passed on as
// SIGINT: the child is not in the terminal's process group and would not receive it; a second
// interrupt ends this process, and the child with it (Pdeathsig). It returns nil when the child
// exits 0, else its exit code as an exitCode.
func runLowered(ctx context.Context, argv []string, nice int, stdin io.Reader, stdout, stderr io.Writer) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), envLowered+"="+strconv.Itoa(nice))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s in a session of its own: %w", argv[0], err)
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGINT)
		case <-done:
		}
	}()
	err := cmd.Wait()
	close(done)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &exit) && exit.ExitCode() > 0:
		return exitCode(exit.ExitCode())
	default:
		return fmt.Errorf("%s in a session of its own: %w", argv[0], err)
	}
}

// Where the kernel keeps this process's autogroup and whether autogroups are on.
const (
	autogroupFile    = "/proc/self/autogroup"
	autogroupEnabled = "/proc/sys/kernel/sched_autogroup_enabled"
)

// lowerSession writes nice to autogroup (/proc/self/autogroup: the scheduling group of this
// process's session), which lowers every process of the session against the other sessions'
// (kube-apiserver, etcd and the controller process each have one, at the default priority).
// Raising one's own nice value needs no privilege. It reports false, without an error, where the
// kernel schedules without autogroups (no such file, or enabled, the sysctl's file, says 0).
// Autogroups do not apply to processes in a CPU cgroup of their own either (some containers and
// systemd services); that is not detected here.
func lowerSession(autogroup, enabled string, nice int) (bool, error) {
	if on, err := os.ReadFile(enabled); err == nil && strings.TrimSpace(string(on)) == "0" {
		return false, nil
	}
	f, err := os.OpenFile(autogroup, os.O_WRONLY|os.O_TRUNC, 0) // never created: only the kernel's file
	if err == nil {
		_, err = f.WriteString(strconv.Itoa(nice))
		err = errors.Join(err, f.Close())
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("lowering this session's CPU priority to nice %d: %w", nice, err)
	}
	return true, nil
}
