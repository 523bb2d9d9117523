package imexsim

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"cdplane/internal/atomicfile"
	"cdplane/internal/imex"
	"cdplane/internal/testutil"
)

// startProcess starts p and stops it when the test ends.
func startProcess(t *testing.T, p *imex.Process) <-chan error {
	t.Helper()
	exited, err := p.Start(withTimeout(t))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	return exited
}

// readyWithin polls Ready until it passes.
func readyWithin(t *testing.T, what string, imex imex.Interface) {
	t.Helper()
	eventually(t, what+" to be ready", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := imex.Ready(ctx)
		return err == nil, fmt.Sprint(err)
	})
}

// simProcess supervises the simulated IMEX as a child process for n, with the options changed
// by opts.
func simProcess(t *testing.T, n *testNode, opts ...func(*imex.Options)) *imex.Process {
	t.Helper()
	o := n.options(t)
	o.Binary, o.CtlBinary = testBinary(t), testBinary(t)
	o.Env = append(helperChildEnv("sim"), HostsFileEnv+"="+n.settings.HostsPath)
	o.Env = append(o.Env, n.options(t).Env...)
	for _, opt := range opts {
		opt(&o)
	}
	return imex.NewReal(o)
}

// TestSimProcessSignals runs the simulated IMEX as child processes driven by real signals:
// SIGUSR1 reloads the node list, the crash command ends the process with CrashExitCode,
// SIGTERM stops it cleanly.
func TestSimProcessSignals(t *testing.T) {
	t.Parallel()
	nodes := newTestNodes(t, true, "127.0.0.21", "127.0.0.22")
	n21, n22 := nodes[0], nodes[1]
	procs := map[*testNode]*imex.Process{}
	exits := map[*testNode]<-chan error{}
	start := time.Now()
	for _, n := range nodes {
		n.write(t, peersOf(nodes...))
		procs[n] = simProcess(t, n)
		exits[n] = startProcess(t, procs[n])
	}
	for _, n := range nodes {
		readyWithin(t, n.ip, procs[n])
	}
	eventually(t, "the pair to connect", allOf(n21.connectedTo("127.0.0.22"), n22.connectedTo("127.0.0.21")))
	t.Logf("two processes ready and connected in %s", time.Since(start))

	// 127.0.0.22 leaves 127.0.0.21's clique: SIGUSR1 makes 127.0.0.21 drop it.
	n21.write(t, peersOf(n21))
	if err := procs[n21].Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	eventually(t, "the reload to drop the removed peer", allOf(
		func() (bool, string) {
			st, err := n21.status()
			return err == nil && st.Reloads == 1, fmt.Sprintf("reloads %d, err %v", st.Reloads, err)
		},
		n21.connectedTo(),
		n22.connectedTo(),
	))

	// The crash command ends 127.0.0.22's process with CrashExitCode.
	if err := Crash(withTimeout(t), n22.settings.IMEXConfigPath); err != nil {
		t.Fatalf("Crash: %v", err)
	}
	err := receive(t, "the crashed process to exit", exits[n22])
	var exitErr *imex.ExitError
	if !errors.As(err, &exitErr) || exitErr.Code != CrashExitCode || !strings.Contains(exitErr.Stderr, ErrCrashed.Error()) {
		t.Fatalf("crashed process ended with %v, want exit status %d mentioning %q", err, CrashExitCode, ErrCrashed)
	}
	if err := procs[n22].Reload(); !errors.Is(err, imex.ErrNotRunning) {
		t.Errorf("Reload after the crash: %v, want imex.ErrNotRunning", err)
	}

	// SIGTERM stops 127.0.0.21 cleanly.
	start = time.Now()
	if err := procs[n21].Stop(withTimeout(t)); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if err := receive(t, "the stopped process to exit", exits[n21]); err != nil {
		t.Errorf("stopped process ended with %v, want nil", err)
	}
	t.Logf("SIGTERM stop took %s", time.Since(start))
	checkListenersGone(t, nodes...)
}

// TestSimProcessRefusesBadConfig checks that a refused configuration ends the process with
// status 1 and a message naming the line, as the real daemon fails.
func TestSimProcessRefusesBadConfig(t *testing.T) {
	t.Parallel()
	n := newTestNodes(t, false, "127.0.0.23")[0]
	n.write(t, peersOf(n))
	if _, err := atomicfile.WriteIfChanged(n.settings.NodesConfigPath, []byte("127.0.0.23\n127.0.0.300\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	exited := startProcess(t, simProcess(t, n))
	err := receive(t, "the process to exit", exited)
	var exitErr *imex.ExitError
	wantLine := n.settings.NodesConfigPath + `:2: "127.0.0.300": invalid IP address`
	if !errors.As(err, &exitErr) || exitErr.Code != 1 || !strings.Contains(exitErr.Stderr, wantLine) {
		t.Fatalf("process ended with %v, want exit status 1 naming %q", err, wantLine)
	}
}

// TestRealProcess drives imex.NewReal's command lines with the simulated IMEX standing in for
// nvidia-imex (-c CONFIG) and nvidia-imex-ctl (-q -c CONFIG prints READY).
func TestRealProcess(t *testing.T) {
	t.Parallel()
	nodes := newTestNodes(t, false, "127.0.0.31", "127.0.0.32")
	n := nodes[0]
	n.write(t, peersOf(nodes...))
	bin := testBinary(t)
	imexd := imex.NewReal(imex.Options{
		ConfigPath: n.settings.IMEXConfigPath,
		Binary:     bin,
		CtlBinary:  bin,
		Env:        append(helperChildEnv("sim"), LocalAddrsEnv+"=127.0.0.31"),
		Log:        testLogger(t),
	})
	if err := imexd.Ready(withTimeout(t)); err == nil {
		t.Fatalf("Ready passed before Start")
	}
	if err := imexd.Reload(); !errors.Is(err, imex.ErrNotRunning) {
		t.Errorf("Reload before Start: %v, want imex.ErrNotRunning", err)
	}
	exited := startProcess(t, imexd)
	if _, err := imexd.Start(withTimeout(t)); !errors.Is(err, imex.ErrAlreadyRunning) {
		t.Errorf("second Start: %v, want imex.ErrAlreadyRunning", err)
	}
	readyWithin(t, "nvidia-imex", imexd)

	if err := imexd.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	eventually(t, "SIGUSR1 to reload", func() (bool, string) {
		st, err := n.status()
		return err == nil && st.Reloads == 1, fmt.Sprintf("reloads %d, err %v", st.Reloads, err)
	})
	if err := imexd.Stop(withTimeout(t)); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if err := receive(t, "the process to exit", exited); err != nil {
		t.Errorf("stopped process ended with %v, want nil", err)
	}
	if err := imexd.Stop(withTimeout(t)); err != nil {
		t.Errorf("Stop when not running: %v", err)
	}
}

// TestProcessStopKillsAfterGrace checks that a process ignoring SIGTERM is killed once the
// grace period ends.
func TestProcessStopKillsAfterGrace(t *testing.T) {
	t.Parallel()
	out := &testutil.SyncBuffer{}
	p := imex.NewReal(imex.Options{
		ConfigPath: "/unused",
		Binary:     testBinary(t),
		Env:        helperChildEnv("stubborn"),
		StopGrace:  300 * time.Millisecond,
		Stdout:     out,
	})
	exited := startProcess(t, p)
	eventually(t, "the helper to ignore SIGTERM", func() (bool, string) {
		return strings.Contains(out.String(), "ignoring SIGTERM"), out.String()
	})
	start := time.Now()
	err := p.Stop(withTimeout(t))
	if err == nil || !strings.Contains(err.Error(), "was killed") {
		t.Fatalf("Stop: %v, want an error saying it was killed", err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("Stop killed after %s, before the grace period", took)
	}
	var exitErr *imex.ExitError
	if err := receive(t, "the process to exit", exited); !errors.As(err, &exitErr) || exitErr.Signal != "killed" {
		t.Errorf("killed process ended with %v, want an imex.ExitError for SIGKILL", err)
	}
}

// TestProcessStopWithoutGraceWaitsForTheContext: with a negative StopGrace (the daemon's, which
// leaves the kill to its pod's grace period) a process ignoring SIGTERM is killed only once
// Stop's context ends, not after DefaultStopGrace.
func TestProcessStopWithoutGraceWaitsForTheContext(t *testing.T) {
	t.Parallel()
	out := &testutil.SyncBuffer{}
	p := imex.NewReal(imex.Options{
		ConfigPath: "/unused",
		Binary:     testBinary(t),
		Env:        helperChildEnv("stubborn"),
		StopGrace:  -1,
		Stdout:     out,
	})
	exited := startProcess(t, p)
	eventually(t, "the helper to ignore SIGTERM", func() (bool, string) {
		return strings.Contains(out.String(), "ignoring SIGTERM"), out.String()
	})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- p.Stop(ctx) }()
	// Still waiting once a process left running has been seen a few times over.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for range 5 {
		<-tick.C
		select {
		case err := <-stopped:
			t.Fatalf("Stop returned %v before its context ended", err)
		default:
		}
	}
	cancel()
	if err := receive(t, "Stop to return once its context ended", stopped); err == nil || !strings.Contains(err.Error(), "was killed") {
		t.Fatalf("Stop: %v, want an error saying it was killed", err)
	}
	var exitErr *imex.ExitError
	if err := receive(t, "the process to exit", exited); !errors.As(err, &exitErr) || exitErr.Signal != "killed" {
		t.Errorf("killed process ended with %v, want an imex.ExitError for SIGKILL", err)
	}
}

// TestProcessUnexpectedExit checks that an exit nobody asked for is reported, even with
// status 0: the supervisor must restart IMEX.
func TestProcessUnexpectedExit(t *testing.T) {
	t.Parallel()
	trueBin, err := exec.LookPath("true")
	if err != nil {
		t.Fatalf("no true binary (coreutils): %v", err)
	}
	exited := startProcess(t, imex.NewReal(imex.Options{ConfigPath: "/unused", Binary: trueBin}))
	var exitErr *imex.ExitError
	if err := receive(t, "the process to exit", exited); !errors.As(err, &exitErr) || exitErr.Code != 0 {
		t.Errorf("process ended with %v, want an imex.ExitError with status 0", err)
	}
}

// TestSimProcessStartupPhase checks the process's start-up phase with real signals: SIGUSR1
// during it kills the process (no handler yet: the signal's default action), SIGTERM during it
// stops the process cleanly, and SIGUSR1 once it is ready is a reload the process survives.
func TestSimProcessStartupPhase(t *testing.T) {
	t.Parallel()
	n := newTestNodes(t, false, "127.0.0.69")[0]
	n.write(t, peersOf(n))
	// startLong starts a process whose start-up phase outlasts the test, and returns once the
	// process says it is starting up (it then has the signal dispositions of that phase).
	startLong := func(t *testing.T) (*imex.Process, <-chan error) {
		t.Helper()
		stderr := &testutil.SyncBuffer{}
		p := simProcess(t, n, func(o *imex.Options) {
			o.Args = []string{"-startup-phase=1h"}
			o.Stderr = stderr
		})
		exited := startProcess(t, p)
		eventually(t, "the process to start up", func() (bool, string) {
			return strings.Contains(stderr.String(), "Simulated IMEX starting up"), stderr.String()
		})
		return p, exited
	}

	t.Run("SIGUSR1 during the start-up phase kills", func(t *testing.T) {
		p, exited := startLong(t)
		if err := p.Ready(withTimeout(t)); err == nil {
			t.Errorf("Ready during the start-up phase passed")
		}
		if err := p.Reload(); err != nil {
			t.Fatalf("Reload (sending SIGUSR1): %v", err)
		}
		err := receive(t, "the process to die of SIGUSR1", exited)
		var exitErr *imex.ExitError
		if !errors.As(err, &exitErr) || exitErr.Signal != syscall.SIGUSR1.String() {
			t.Fatalf("process ended with %v, want an imex.ExitError for %s", err, syscall.SIGUSR1)
		}
		checkListenersGone(t, n)
	})

	t.Run("SIGTERM during the start-up phase stops cleanly", func(t *testing.T) {
		p, exited := startLong(t)
		if err := p.Stop(withTimeout(t)); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if err := receive(t, "the stopped process to exit", exited); err != nil {
			t.Fatalf("stopped process ended with %v, want nil", err)
		}
		checkListenersGone(t, n)
	})

	t.Run("SIGUSR1 once ready reloads", func(t *testing.T) {
		p := simProcess(t, n)
		exited := startProcess(t, p)
		readyWithin(t, n.ip, p)
		if err := p.Reload(); err != nil {
			t.Fatalf("Reload: %v", err)
		}
		eventually(t, "SIGUSR1 to reload", func() (bool, string) {
			st, err := n.status()
			return err == nil && st.Reloads == 1, fmt.Sprintf("reloads %d, err %v", st.Reloads, err)
		})
		readyWithin(t, n.ip+" after the reload", p)
		if err := p.Stop(withTimeout(t)); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if err := receive(t, "the stopped process to exit", exited); err != nil {
			t.Fatalf("stopped process ended with %v, want nil (it survived the reload)", err)
		}
	})
}
