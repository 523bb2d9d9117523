package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cdplane/internal/testutil"
)

// TestInProcessRunner: programs are picked by command[0]'s base name and get the command's
// arguments, the container's environment and its log; SIGTERM cancels, Kill reports 137, a
// panic is exit code 2 with the stack in the log, an error is 1; other commands go to Fallback.
func TestInProcessRunner(t *testing.T) {
	started := make(chan struct{}, 8)
	r := &InProcessRunner{
		Programs: map[string]Program{
			"tool": func(ctx context.Context, args []string, env func(string) (string, bool), out io.Writer) error {
				greeting, _ := env("GREETING")
				fmt.Fprintln(out, greeting, strings.Join(args, " "))
				switch {
				case len(args) > 0 && args[0] == "wait":
					started <- struct{}{}
					<-ctx.Done()
					return nil
				case len(args) > 0 && args[0] == "panic":
					panic("boom")
				case len(args) > 0 && args[0] == "fail":
					return errors.New("refused")
				}
				return nil
			},
		},
		Fallback: NoopRunner{},
	}
	run := func(args ...string) (Handle, *testutil.SyncBuffer) {
		t.Helper()
		log := &testutil.SyncBuffer{}
		spec := &ContainerSpec{Image: "cdplane:v1", Command: []string{"/bin/tool"}, Args: args,
			Env: []EnvVar{{Name: "GREETING", Value: "ignored"}, {Name: "GREETING", Value: "hi"}}, Log: log}
		h, err := r.Start(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		return h, log
	}

	h, log := run("a", "b")
	if code := waitDone(t, h); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	if got := log.String(); got != "hi a b\n" {
		t.Errorf("log %q, want %q (later env entry wins)", got, "hi a b\n")
	}

	h, _ = run("wait")
	<-started
	if err := h.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitDone(t, h); code != 0 {
		t.Errorf("exit code after SIGTERM %d, want 0 (the program returned nil)", code)
	}

	h, _ = run("wait")
	<-started
	if err := h.Signal(syscall.SIGUSR1); err == nil {
		t.Error("SIGUSR1 was accepted; an in-process container cannot take it")
	}
	if err := h.Kill(); err != nil {
		t.Fatal(err)
	}
	if code := waitDone(t, h); code != 137 {
		t.Errorf("exit code after Kill %d, want 137", code)
	}

	h, log = run("panic")
	if code := waitDone(t, h); code != 2 {
		t.Errorf("exit code after a panic %d, want 2", code)
	}
	if !strings.Contains(log.String(), "tool: panic: boom") || !strings.Contains(log.String(), "goroutine") {
		t.Errorf("log of a panic lacks the message or the stack: %q", log.String())
	}

	h, log = run("fail")
	if code := waitDone(t, h); code != 1 {
		t.Errorf("exit code after an error %d, want 1", code)
	}
	if got := log.String(); !strings.HasSuffix(got, "tool: refused\n") {
		t.Errorf("log %q does not end with the error", got)
	}

	spec := &ContainerSpec{Image: "cdplane:v1", Command: []string{"tool"}, Log: io.Discard}
	res, err := r.Exec(context.Background(), spec, []string{"/bin/tool", "fail"})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 1 || !strings.Contains(string(res.Output), "tool: refused") {
		t.Errorf("exec: exit code %d output %q, want 1 and the error", res.ExitCode, res.Output)
	}

	// A command without a program goes to Fallback: the no-op container records its args.
	var noop testutil.SyncBuffer
	spec = &ContainerSpec{Image: "busybox", Command: []string{"sh"}, Args: []string{"-c", "true"}, Log: &noop,
		Annotations: map[string]string{AnnotationExitCode: "0"}}
	h, err = r.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, h)
	if !strings.HasPrefix(noop.String(), "ARGS sh -c true\n") {
		t.Errorf("fallback log %q, want the no-op record", noop.String())
	}
}

// A killed instance that has not returned within KillGrace is reported exited and left behind;
// its container's next instance starts only once it has returned (never two at once, as a
// killed process's port is free before its container restarts), or LeftBehindWait later.
// Other containers do not wait.
func TestInProcessRunnerWaitsForALeftBehindInstance(t *testing.T) {
	var running, overlaps atomic.Int32 // instances of the "plugin" container
	release := make(chan struct{})
	started := make(chan string, 8)
	prog := func(ctx context.Context, args []string, _ func(string) (string, bool), _ io.Writer) error {
		if args[0] == "same" {
			if running.Add(1) > 1 {
				overlaps.Add(1)
			}
			defer running.Add(-1)
		}
		started <- args[0]
		<-ctx.Done()
		<-release // a slow shutdown
		return nil
	}
	r := &InProcessRunner{Programs: map[string]Program{"tool": prog}, KillGrace: 20 * time.Millisecond, LeftBehindWait: time.Minute}
	start := func(ctx context.Context, name, arg string, log io.Writer) (Handle, error) {
		return r.Start(ctx, &ContainerSpec{PodUID: "pod-1", Name: name, Command: []string{"tool"}, Args: []string{arg}, Log: log})
	}

	first, err := start(t.Context(), "plugin", "same", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	log := &testutil.SyncBuffer{}
	if err := first.Kill(); err != nil {
		t.Fatal(err)
	}
	if code := waitDone(t, first); code != 137 {
		t.Errorf("exit code of the instance left behind %d, want 137", code)
	}

	// Another container of the pod starts at once (its instance is released at the end).
	other, err := start(t.Context(), "sidecar", "other", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := <-started; got != "other" {
		t.Fatalf("started %q, want the other container", got)
	}
	_ = other.Signal(syscall.SIGTERM)

	// A start that is given up while it waits says so.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := start(ctx, "plugin", "same", io.Discard); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled start while the previous instance runs: %v, want context.Canceled", err)
	}

	next := make(chan Handle, 1)
	go func() {
		h, err := start(t.Context(), "plugin", "same", log)
		if err != nil {
			t.Error(err)
		}
		next <- h
	}()
	// Nothing may start while the instance left behind runs: give a wrong start time to show.
	select {
	case got := <-started:
		t.Fatalf("%q started while the instance left behind still runs", got)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	h := <-next
	if got := <-started; got != "same" {
		t.Fatalf("started %q, want the container's next instance", got)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("the next instance ran beside the one left behind (%d times)", n)
	}
	_ = h.Signal(syscall.SIGTERM)
	waitDone(t, h)

	// A container that is not restarted: its instance left behind is forgotten once it returns.
	slow := make(chan struct{})
	solo := &InProcessRunner{Programs: map[string]Program{"tool": func(ctx context.Context, _ []string, _ func(string) (string, bool), _ io.Writer) error {
		<-ctx.Done()
		<-slow
		return nil
	}}, KillGrace: 20 * time.Millisecond}
	recorded := func() int {
		solo.mu.Lock()
		defer solo.mu.Unlock()
		return len(solo.behind)
	}
	h, err = solo.Start(t.Context(), &ContainerSpec{PodUID: "pod-3", Name: "plugin", Command: []string{"tool"}, Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	_ = h.Kill()
	waitDone(t, h)
	if n := recorded(); n != 1 {
		t.Fatalf("%d instances recorded as left behind, want 1", n)
	}
	close(slow)
	testutil.Eventually(t, 10*time.Second, "nothing recorded as left behind", func() (bool, error) {
		return recorded() == 0, nil
	})

	// One that never returns holds the next for LeftBehindWait only.
	stuck := &InProcessRunner{Programs: map[string]Program{"tool": func(ctx context.Context, _ []string, _ func(string) (string, bool), _ io.Writer) error {
		<-ctx.Done()
		<-t.Context().Done()
		return nil
	}}, KillGrace: 20 * time.Millisecond, LeftBehindWait: 50 * time.Millisecond}
	spec := func(log io.Writer) *ContainerSpec {
		return &ContainerSpec{PodUID: "pod-2", Name: "plugin", Command: []string{"tool"}, Log: log}
	}
	h, err = stuck.Start(t.Context(), spec(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	_ = h.Kill()
	waitDone(t, h)
	log = &testutil.SyncBuffer{}
	if _, err := stuck.Start(t.Context(), spec(log)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "left behind, still runs 50ms later: starting anyway") {
		t.Errorf("log of an instance started beside one left behind: %q", log.String())
	}
}
