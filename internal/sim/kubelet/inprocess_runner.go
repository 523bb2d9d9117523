package kubelet

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Program is a container entry point run inside this process: args are the container's
// command after command[0], then its args; lookupEnv reads the container's environment; out is
// its log (stdout and stderr). It must return soon after ctx ends, which is how it is told to
// stop. A nil error is exit code 0, any other 1.
type Program func(ctx context.Context, args []string, lookupEnv func(string) (string, bool), out io.Writer) error

// InProcessRunner runs containers whose command names one of its Programs (by the base name of
// command[0]) as goroutines of this process, one instance per container, and hands every other
// container to Fallback. It is what lets a sim of thousands of nodes run a plugin and a daemon
// per node: an instance costs goroutines and its caches, not a process.
//
// Compared with a process: SIGTERM and SIGINT cancel the instance's context (exit code 0 or 1,
// from what the program returns); Kill cancels it too and reports 137, but the program still
// runs its own shutdown path — a goroutine cannot be killed; an instance that has not returned
// KillGrace after Kill is reported exited and left behind, with a line in its log; the next
// instance of the same container (pod UID and container name) starts only once it has
// returned, or LeftBehindWait later: a killed process's ports and sockets are free when its
// container restarts, and a left-behind instance still holds its own (in a starved large sim,
// killed plugins still held their metrics port, and their restarts exited on it into
// CrashLoopBackOff). A panic ends the instance with exit code 2 and the stack in its log, not the
// process. The working directory is not applied (instances share the process's).
type InProcessRunner struct {
	Programs map[string]Program
	Fallback Runner
	// KillGrace and LeftBehindWait: DefaultKillGrace and DefaultLeftBehindWait when zero.
	KillGrace, LeftBehindWait time.Duration

	mu sync.Mutex
	// behind holds, by container, the returned channel of its instance left behind.
	behind map[containerKey]chan struct{}
}

var _ Runner = (*InProcessRunner)(nil)

// containerKey names a container across its restarts.
type containerKey struct {
	pod  types.UID
	name string
}

const (
	// DefaultKillGrace is how long Kill waits for an instance to return before reporting it
	// exited.
	DefaultKillGrace = 10 * time.Second
	// DefaultLeftBehindWait is how long the next instance of a container waits for one left
	// behind to return.
	DefaultLeftBehindWait = 5 * time.Minute
)

func (r *InProcessRunner) killGrace() time.Duration {
	if r.KillGrace > 0 {
		return r.KillGrace
	}
	return DefaultKillGrace
}

func (r *InProcessRunner) leftBehindWait() time.Duration {
	if r.LeftBehindWait > 0 {
		return r.LeftBehindWait
	}
	return DefaultLeftBehindWait
}

// leaveBehind records h as its container's instance left behind.
func (r *InProcessRunner) leaveBehind(h *inProcessHandle) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.behind == nil {
		r.behind = map[containerKey]chan struct{}{}
	}
	r.behind[h.key] = h.returned
}

// awaitLeftBehind waits, for at most LeftBehindWait, for the instance of key left behind (if
// any) to return, and reports on log when it has not.
func (r *InProcessRunner) awaitLeftBehind(ctx context.Context, key containerKey, log io.Writer) error {
	r.mu.Lock()
	returned, ok := r.behind[key]
	r.mu.Unlock()
	if !ok {
		return nil
	}
	wait := r.leftBehindWait()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-returned:
	case <-t.C:
		fmt.Fprintf(log, "the previous instance, left behind, still runs %s later: starting anyway\n", wait)
	case <-ctx.Done():
		return ctx.Err()
	}
	r.forgetLeftBehind(key, returned)
	return nil
}

// forgetLeftBehind drops key's instance left behind if it is the one whose returned channel this
// is: once it has returned (a container that is not restarted leaves nothing recorded), or when
// its next instance no longer waits for it.
func (r *InProcessRunner) forgetLeftBehind(key containerKey, returned chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.behind[key] == returned {
		delete(r.behind, key)
	}
}

func (r *InProcessRunner) program(command []string) (Program, bool) {
	if len(command) == 0 {
		return nil, false
	}
	p, ok := r.Programs[filepath.Base(command[0])]
	return p, ok
}

func (r *InProcessRunner) fallback() Runner {
	if r.Fallback != nil {
		return r.Fallback
	}
	return NoopRunner{}
}

// Start starts an instance of the container's program, or the container through Fallback.
func (r *InProcessRunner) Start(ctx context.Context, spec *ContainerSpec) (Handle, error) {
	p, ok := r.program(spec.Command)
	if !ok {
		return r.fallback().Start(ctx, spec)
	}
	log := spec.Log
	if log == nil {
		log = io.Discard
	}
	key := containerKey{pod: spec.PodUID, name: spec.Name}
	if err := r.awaitLeftBehind(ctx, key, log); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	h := &inProcessHandle{r: r, key: key, cancel: cancel, done: make(chan struct{}), returned: make(chan struct{}), log: log}
	args := append(append([]string{}, spec.Command[1:]...), spec.Args...)
	go func() {
		code := invoke(runCtx, p, filepath.Base(spec.Command[0]), args, envLookup(spec.Env), log)
		h.finish(code)
		close(h.returned)
		r.forgetLeftBehind(key, h.returned)
	}()
	return h, nil
}

// Exec runs the program named by command[0] to completion (an exec probe such as
// "cdplane-daemon check"), or the command through Fallback.
func (r *InProcessRunner) Exec(ctx context.Context, spec *ContainerSpec, command []string) (ExecResult, error) {
	p, ok := r.program(command)
	if !ok {
		return r.fallback().Exec(ctx, spec, command)
	}
	out := &limitedBuffer{max: 64 << 10}
	code := invoke(ctx, p, filepath.Base(command[0]), command[1:], envLookup(spec.Env), out)
	if ctx.Err() != nil {
		return ExecResult{}, fmt.Errorf("exec %s: %w", command[0], ctx.Err())
	}
	return ExecResult{ExitCode: code, Output: out.b}, nil
}

// invoke runs p and returns its exit code, writing an error or a panic to out.
func invoke(ctx context.Context, p Program, name string, args []string, env func(string) (string, bool), out io.Writer) (code int) {
	defer func() {
		if v := recover(); v != nil {
			fmt.Fprintf(out, "%s: panic: %v\n%s", name, v, debug.Stack())
			code = 2
		}
	}()
	if err := p(ctx, args, env, out); err != nil {
		fmt.Fprintf(out, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// envLookup is a lookup function over env; a later entry wins over an earlier one of the same
// name, as in a process's environment built from a container spec.
func envLookup(env []EnvVar) func(string) (string, bool) {
	m := make(map[string]string, len(env))
	for _, e := range env {
		m[e.Name] = e.Value
	}
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

type inProcessHandle struct {
	r        *InProcessRunner
	key      containerKey
	cancel   context.CancelFunc
	done     chan struct{}
	returned chan struct{}
	log      io.Writer

	mu     sync.Mutex
	code   int
	killed bool
	closed bool
}

// finish records the exit code and closes done, once.
func (h *inProcessHandle) finish(code int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	if h.killed {
		code = 128 + int(syscall.SIGKILL)
	}
	h.code, h.closed = code, true
	close(h.done)
}

func (h *inProcessHandle) Done() <-chan struct{} { return h.done }

func (h *inProcessHandle) ExitCode() int {
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.code
}

// Signal cancels the instance on SIGTERM or SIGINT; SIGKILL is Kill.
func (h *inProcessHandle) Signal(sig os.Signal) error {
	switch sig {
	case syscall.SIGTERM, syscall.SIGINT, os.Interrupt:
		h.cancel()
		return nil
	case syscall.SIGKILL, os.Kill:
		return h.Kill()
	default:
		return fmt.Errorf("an in-process container takes SIGTERM, SIGINT or SIGKILL, not %v", sig)
	}
}

// Kill cancels the instance and reports it exited with 137 once it returns, or after the
// runner's KillGrace if it does not (left behind: its container's next instance waits for it).
func (h *inProcessHandle) Kill() error {
	h.mu.Lock()
	h.killed = true
	h.mu.Unlock()
	h.cancel()
	grace := h.r.killGrace()
	go func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-h.returned:
		case <-t.C:
			fmt.Fprintf(h.log, "killed, and still running %s later: reported exited, left behind\n", grace)
			h.r.leaveBehind(h)
			h.finish(0)
		}
	}()
	return nil
}
