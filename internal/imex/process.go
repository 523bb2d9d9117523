package imex

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// stderrTail is how much of a process's stderr an ExitError keeps.
const stderrTail = 4096

// Process runs IMEX as a child process: the real nvidia-imex (NewReal) or the simulated one
// (an nvidia-imex found the same way). It implements Interface with real signals.
type Process struct {
	opts   Options
	binary string
	args   []string
	ready  func(ctx context.Context) error

	mu  sync.Mutex
	run *procRun
}

var _ Interface = (*Process)(nil)

// procRun is one run of the process.
type procRun struct {
	cmd      *exec.Cmd
	done     chan struct{} // closed once the process was reaped and result set
	result   error
	stopping atomic.Bool
}

// NewReal supervises the real IMEX daemon: `nvidia-imex -c <ConfigPath>`, which stays in the
// foreground because the rendered config sets DAEMONIZE=0, and answers Ready with
// `nvidia-imex-ctl -q -c <ConfigPath>`, which prints READY once the local daemon is ready.
func NewReal(o Options) *Process {
	ctl := cmp.Or(o.CtlBinary, "nvidia-imex-ctl")
	return &Process{
		opts:   o,
		binary: cmp.Or(o.Binary, "nvidia-imex"),
		args:   append(slices.Clone(o.Args), "-c", o.ConfigPath),
		ready: func(ctx context.Context) error {
			return ctlReady(ctx, ctl, o.ConfigPath, o.Env)
		},
	}
}

// Start launches the binary with its arguments and Options.Env added to this process's
// environment, and returns once it was launched (Interface.Start); ErrAlreadyRunning while a
// run is in progress. On Linux the kernel kills the child if this process dies; the tail of
// its stderr goes into the run's ExitError (and all of it to Options.Stderr, when set).
func (p *Process) Start(ctx context.Context) (<-chan error, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", p.binary, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.run != nil && !isClosed(p.run.done) {
		return nil, ErrAlreadyRunning
	}
	tail := &tailBuffer{max: stderrTail}
	cmd := exec.Command(p.binary, p.args...)
	cmd.Env = append(os.Environ(), p.opts.Env...)
	cmd.Stdout = p.opts.Stdout
	cmd.Stderr = tail
	if p.opts.Stderr != nil {
		cmd.Stderr = io.MultiWriter(tail, p.opts.Stderr)
	}
	// A grandchild holding stderr open must not keep Wait from returning.
	cmd.WaitDelay = time.Second
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", p.binary, err)
	}
	run := &procRun{cmd: cmd, done: make(chan struct{})}
	p.run = run
	log := p.opts.logger().WithValues("binary", p.binary, "pid", cmd.Process.Pid)
	log.V(1).Info("Started IMEX")
	exited := make(chan error, 1)
	go func() {
		run.result = p.exitResult(run, cmd.Wait(), tail)
		log.V(1).Info("IMEX exited", "result", fmt.Sprint(run.result))
		close(run.done)
		exited <- run.result
		close(exited)
	}()
	return exited, nil
}

// exitResult turns Wait's error into the run's result: nil for a clean exit that Stop asked
// for, otherwise an *ExitError.
func (p *Process) exitResult(run *procRun, waitErr error, tail *tailBuffer) error {
	e := &ExitError{Binary: p.binary, Stderr: tail.String()}
	var exitErr *exec.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &exitErr):
		e.Code = exitErr.ExitCode()
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Signal = ws.Signal().String()
		}
	default:
		return fmt.Errorf("waiting for %s: %w", p.binary, waitErr)
	}
	// A process killed after the grace period ended by SIGKILL: not clean.
	stoppedCleanly := e.Code == 0 || e.Signal == syscall.SIGTERM.String()
	if run.stopping.Load() && stoppedCleanly {
		return nil
	}
	return e
}

// Reload sends SIGUSR1.
func (p *Process) Reload() error {
	p.mu.Lock()
	run := p.run
	p.mu.Unlock()
	if run == nil || isClosed(run.done) {
		return ErrNotRunning
	}
	err := run.cmd.Process.Signal(syscall.SIGUSR1)
	if errors.Is(err, os.ErrProcessDone) {
		return ErrNotRunning
	}
	if err != nil {
		return fmt.Errorf("sending SIGUSR1 to %s: %w", p.binary, err)
	}
	p.opts.logger().V(1).Info("Sent SIGUSR1 to IMEX", "pid", run.cmd.Process.Pid)
	return nil
}

// Stop sends SIGTERM and kills the process if it has not exited after the grace period or
// once ctx is done.
func (p *Process) Stop(ctx context.Context) error {
	p.mu.Lock()
	run := p.run
	p.mu.Unlock()
	if run == nil || isClosed(run.done) {
		return nil
	}
	run.stopping.Store(true)
	err := run.cmd.Process.Signal(syscall.SIGTERM)
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("sending SIGTERM to %s: %w", p.binary, err)
	}
	grace := p.opts.stopGrace()
	var expired <-chan time.Time
	if grace > 0 {
		timer := time.NewTimer(grace)
		defer timer.Stop()
		expired = timer.C
	}
	select {
	case <-run.done:
		return run.result
	case <-expired:
	case <-ctx.Done():
	}
	if err := run.cmd.Process.Kill(); errors.Is(err, os.ErrProcessDone) {
		<-run.done // it exited on its own just now
		return run.result
	}
	<-run.done
	if grace <= 0 {
		return fmt.Errorf("%s had not exited after SIGTERM when its stop ended and was killed: %w", p.binary, run.result)
	}
	return fmt.Errorf("%s did not exit within %s of SIGTERM and was killed: %w", p.binary, grace, run.result)
}

// Ready runs the readiness query.
func (p *Process) Ready(ctx context.Context) error { return p.ready(ctx) }

// ctlReady runs `<ctl> -q -c <config>` and expects it to print READY.
func ctlReady(ctx context.Context, ctl, configPath string, env []string) error {
	cmd := exec.CommandContext(ctx, ctl, "-q", "-c", configPath)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	answer := strings.TrimSpace(string(out))
	if err != nil {
		return fmt.Errorf("running %s -q: %w (output %q)", ctl, err, answer)
	}
	if answer != "READY" {
		return fmt.Errorf("%w: %s -q printed %q", ErrNotReady, ctl, answer)
	}
	return nil
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = slices.Clone(t.buf[over:])
	}
	return len(b), nil
}

// String is the kept text, trimmed, starting at a line boundary when it was cut.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	text := t.buf
	if len(text) == t.max {
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			text = text[i+1:]
		}
	}
	return strings.TrimSpace(string(text))
}
