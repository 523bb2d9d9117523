package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Pod annotations read by NoopRunner.
const (
	// AnnotationRunFor: a container exits (with AnnotationExitCode, default 0) after this
	// duration, e.g. "20s".
	AnnotationRunFor = "sim.cdplane.io/run-for"
	// AnnotationExitCode: the exit code; alone, the container exits with it at once.
	AnnotationExitCode = "sim.cdplane.io/exit-code"
)

// NoopRunner stands for any image without a simulation of its own. It writes a record of what
// the container was given to its log:
//
//	ARGS <command and args, space separated>
//	ENV NAME=value         (one line per variable, sorted by name)
//	DEVICE <containerPath> <hostPath>
//	MOUNT <containerPath> <hostPath>
//
// and then runs until stopped (SIGTERM: exit 0; kill: 137); with AnnotationRunFor it exits
// after that time, with AnnotationExitCode alone at once, with that code (default 0). An init
// container that is not a sidecar exits 0 at once unless the annotations say otherwise.
// Exec runs the command on the host (found through PATH) with the container's environment.
type NoopRunner struct{}

var _ Runner = NoopRunner{}

// Start writes the record and starts the stand-in.
func (NoopRunner) Start(_ context.Context, spec *ContainerSpec) (Handle, error) {
	runFor, code, err := noopBehaviour(spec.Annotations, spec.Init)
	if err != nil {
		return nil, err
	}
	if spec.Log != nil {
		if _, err := io.WriteString(spec.Log, NoopRecord(spec)); err != nil {
			return nil, fmt.Errorf("writing the record: %w", err)
		}
	}
	h := &noopHandle{done: make(chan struct{}), stop: make(chan int, 1)}
	go h.run(runFor, code)
	return h, nil
}

// noopBehaviour reads the annotations: how long to run (negative: until stopped) and the exit
// code.
func noopBehaviour(ann map[string]string, init bool) (time.Duration, int, error) {
	runFor := time.Duration(-1)
	if init {
		runFor = 0
	}
	code := 0
	if v, ok := ann[AnnotationExitCode]; ok {
		c, err := strconv.Atoi(v)
		if err != nil || c < 0 || c > 255 {
			return 0, 0, fmt.Errorf("annotation %s=%q: want 0 to 255", AnnotationExitCode, v)
		}
		code, runFor = c, 0
	}
	if v, ok := ann[AnnotationRunFor]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return 0, 0, fmt.Errorf("annotation %s=%q: want a duration", AnnotationRunFor, v)
		}
		runFor = d
	}
	return runFor, code, nil
}

// NoopRecord is what NoopRunner writes to a container's log.
func NoopRecord(spec *ContainerSpec) string {
	var b strings.Builder
	b.WriteString("ARGS " + strings.Join(append(append([]string{}, spec.Command...), spec.Args...), " ") + "\n")
	env := spec.Environ()
	sort.Strings(env)
	for _, e := range env {
		b.WriteString("ENV " + e + "\n")
	}
	for _, d := range spec.Devices {
		fmt.Fprintf(&b, "DEVICE %s %s\n", d.ContainerPath, d.HostPath)
	}
	for _, m := range spec.Mounts {
		fmt.Fprintf(&b, "MOUNT %s %s\n", m.ContainerPath, m.HostPath)
	}
	return b.String()
}

type noopHandle struct {
	done chan struct{}
	stop chan int
	once sync.Once
	code int
}

func (h *noopHandle) run(runFor time.Duration, code int) {
	var timer <-chan time.Time
	if runFor >= 0 {
		t := time.NewTimer(runFor)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-timer:
	case code = <-h.stop:
	}
	h.code = code
	close(h.done)
}

func (h *noopHandle) Done() <-chan struct{} { return h.done }

func (h *noopHandle) ExitCode() int {
	<-h.done
	return h.code
}

func (h *noopHandle) Signal(sig os.Signal) error {
	if sig == syscall.SIGKILL {
		return h.Kill()
	}
	if sig == syscall.SIGTERM || sig == syscall.SIGINT {
		h.send(0)
	}
	return nil
}

func (h *noopHandle) Kill() error {
	h.send(128 + int(syscall.SIGKILL))
	return nil
}

func (h *noopHandle) send(code int) {
	h.once.Do(func() { h.stop <- code })
}

// Exec runs command on the host with the container's environment.
func (NoopRunner) Exec(ctx context.Context, spec *ContainerSpec, command []string) (ExecResult, error) {
	if len(command) == 0 {
		return ExecResult{}, errors.New("empty command")
	}
	path, err := exec.LookPath(command[0])
	if err != nil {
		return ExecResult{}, err
	}
	return runExec(ctx, spec, path, command[1:])
}

// runExec runs one command to completion and returns its exit code and combined output (the
// first 64 KiB).
func runExec(ctx context.Context, spec *ContainerSpec, path string, args []string) (ExecResult, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = withHostPath(spec.Environ(), "")
	cmd.Dir = spec.WorkingDir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out limitedBuffer
	out.max = 64 << 10
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		return ExecResult{}, fmt.Errorf("exec %s: %w", path, ctx.Err())
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return ExecResult{ExitCode: exitCode(exitErr.ProcessState), Output: out.b}, nil
	}
	if err != nil {
		return ExecResult{}, err
	}
	return ExecResult{Output: out.b}, nil
}

// withHostPath adds PATH (dir first, then the host's) unless env sets it.
func withHostPath(env []string, dir string) []string {
	for _, e := range env {
		if strings.HasPrefix(e, "PATH=") {
			return env
		}
	}
	p := os.Getenv("PATH")
	if dir != "" {
		p = dir + string(os.PathListSeparator) + p
	}
	return append(env, "PATH="+p)
}

type limitedBuffer struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.max - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
