package imexsim

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"

	"cdplane/internal/imex"
	"cdplane/internal/testutil"
)

// markerPeers reads the unsafe-termination marker below nodeDir: whether it exists, and the
// peers it lists.
func markerPeers(t *testing.T, nodeDir string) ([]string, bool) {
	t.Helper()
	peers, found, err := readMarker(filepath.Join(nodeDir, UnsafeMarkerPath))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, p := range peers {
		out = append(out, p.String())
	}
	return out, found
}

// markerLists waits until the marker below nodeDir lists exactly want.
func markerLists(t *testing.T, nodeDir string, want ...string) func() (bool, string) {
	return func() (bool, string) {
		got, found := markerPeers(t, nodeDir)
		return found && slices.Equal(got, append([]string{}, want...)), fmt.Sprintf("marker %v (exists: %v)", got, found)
	}
}

// leaveMarker writes an unsafe-termination marker below nodeDir, as a run that crashed while
// connected to peers leaves it.
func leaveMarker(t *testing.T, nodeDir string, peers ...string) {
	t.Helper()
	var addrs []netip.Addr
	for _, p := range peers {
		addrs = append(addrs, netip.MustParseAddr(p))
	}
	path := filepath.Join(nodeDir, UnsafeMarkerPath)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, renderMarker(addrs), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSimSessionInUse checks that one IMEX a node holds the node's IMEX session: a second run
// on the node, in this process or as a process, ends at the end of its start-up phase with
// NV_ERR_IN_USE, and takes the session once the first has stopped.
func TestSimSessionInUse(t *testing.T) {
	t.Parallel()
	nodes := newTestNodes(t, false, "127.0.0.91", "127.0.0.92")
	first, second := nodes[0], nodes[1]
	dir := first.withNodeDir(t)
	second.env = append(second.env, NodeDirEnv+"="+dir)
	for _, n := range nodes {
		n.write(t, peersOf(n))
	}
	simFirst, exitedFirst := startSim(t, first)
	readyWithin(t, first.ip, simFirst)

	simSecond, exitedSecond := startSim(t, second)
	err := receive(t, "the second run on the node to end", exitedSecond)
	if !errors.Is(err, ErrSessionInUse) || !strings.Contains(err.Error(), "NV_ERR_IN_USE") {
		t.Fatalf("second run on the node ended with %v, want ErrSessionInUse naming NV_ERR_IN_USE", err)
	}

	// Another process: the flock excludes it.
	exited := startProcess(t, simProcess(t, second))
	err = receive(t, "the process on the node to exit", exited)
	var exitErr *imex.ExitError
	if !errors.As(err, &exitErr) || exitErr.Code != 1 || !strings.Contains(exitErr.Stderr, "NV_ERR_IN_USE") {
		t.Fatalf("process on the node ended with %v, want exit status 1 naming NV_ERR_IN_USE", err)
	}
	if err := simFirst.Ready(withTimeout(t)); err != nil {
		t.Errorf("the session's holder after the others failed: %v", err)
	}

	// Once the holder stopped, the session is free.
	ctx := withTimeout(t)
	if err := simFirst.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := receive(t, "the first run to end", exitedFirst); err != nil {
		t.Fatalf("first run ended with %v, want nil", err)
	}
	if _, err := simSecond.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	readyWithin(t, second.ip+" with the session", simSecond)
}

// TestSimRecovery checks the unsafe-termination marker and the recovery: a run marks the
// session with the peers it connected to, a crash leaves the marker, and the next run
// (IMEX_WAIT_FOR_QUORUM=RECOVERY) answers RECOVERY, not READY, until it is connected to those
// peers again; a clean stop removes the marker.
func TestSimRecovery(t *testing.T) {
	t.Parallel()
	nodes := newTestNodes(t, false, "127.0.0.93", "127.0.0.94")
	n93, n94 := nodes[0], nodes[1]
	dir := n93.withNodeDir(t)
	n93.withConfigLine(waitForQuorumKey, quorumRecovery)
	for _, n := range nodes {
		n.write(t, peersOf(nodes...))
	}
	sim93, exited93 := startSim(t, n93, func(s *Sim) { s.recoveryTimeout = time.Hour })
	sim94, exited94 := startSim(t, n94)
	eventually(t, "the pair to connect", allOf(n93.connectedTo("127.0.0.94"), n94.connectedTo("127.0.0.93")))
	eventually(t, "the marker to list the connected peer", markerLists(t, dir, "127.0.0.94"))

	ctx := withTimeout(t)
	if err := Crash(ctx, n93.settings.IMEXConfigPath); err != nil {
		t.Fatalf("Crash: %v", err)
	}
	if err := receive(t, "the crashed run to end", exited93); !errors.Is(err, ErrCrashed) {
		t.Fatalf("crashed run ended with %v, want ErrCrashed", err)
	}
	if ok, seen := markerLists(t, dir, "127.0.0.94")(); !ok {
		t.Fatalf("after the crash: %s; want it left, listing 127.0.0.94", seen)
	}

	// The peer is gone while 127.0.0.93 restarts: it recovers, waiting for it.
	if err := sim94.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := receive(t, "127.0.0.94 to stop", exited94); err != nil {
		t.Fatalf("127.0.0.94 ended with %v", err)
	}
	exited93, err := sim93.Start(ctx)
	if err != nil {
		t.Fatalf("restarting: %v", err)
	}
	eventually(t, "the restarted run to recover", func() (bool, string) {
		st, err := n93.status()
		return err == nil && st.Recovering && !st.Ready && slices.Equal(st.RecoveryWaitingFor, []string{"127.0.0.94"}),
			fmt.Sprintf("%+v, %v", st, err)
	})
	if err := sim93.Ready(ctx); !errors.Is(err, imex.ErrNotReady) || !strings.Contains(err.Error(), answerRecovery) {
		t.Errorf("Ready while recovering: %v, want ErrNotReady saying %s", err, answerRecovery)
	}
	if ok, seen := markerLists(t, dir, "127.0.0.94")(); !ok {
		t.Errorf("while recovering: %s; want the unsafe run's peer kept", seen)
	}

	// The peer comes back: the recovery is over.
	if _, err := sim94.Start(ctx); err != nil {
		t.Fatalf("restarting 127.0.0.94: %v", err)
	}
	readyWithin(t, "127.0.0.93 after the recovery", sim93)
	if st := n93.mustStatus(t); st.Recovering || len(st.RecoveryWaitingFor) != 0 {
		t.Errorf("after the recovery: recovering %v, waiting for %v", st.Recovering, st.RecoveryWaitingFor)
	}

	// A clean stop removes the marker.
	if err := sim93.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := receive(t, "the stopped run to end", exited93); err != nil {
		t.Fatalf("stopped run ended with %v, want nil", err)
	}
	if _, found := markerPeers(t, dir); found {
		t.Errorf("the marker is left after a clean stop")
	}
}

// TestSimUnsafeStart checks what a run does with the marker an unsafe run left, listing a peer
// that does not come back: with IMEX_WAIT_FOR_QUORUM=RECOVERY it waits for the recovery
// timeout, then is READY; without it, it does not wait; and a run killed during its start-up
// phase leaves the marker as it found it.
func TestSimUnsafeStart(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		waitForQuorum string
		killed        bool // reloaded during the start-up phase
		wantLog       []string
		wantMarker    []string // after the run is ready, or killed
	}{
		"recovery times out": {
			waitForQuorum: quorumRecovery,
			wantLog:       []string{"recovering, waiting for its peers", `"reason"="recovery timeout: gave up on [127.0.0.96]"`},
			wantMarker:    []string{},
		},
		"no quorum wait": {
			waitForQuorum: "NONE",
			wantLog:       []string{"not waiting for its peers"},
			wantMarker:    []string{},
		},
		"killed during the start-up phase": {
			waitForQuorum: quorumRecovery,
			killed:        true,
			wantMarker:    []string{"127.0.0.96"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			n := newTestNodes(t, false, "127.0.0.95")[0]
			n.withConfigLine(waitForQuorumKey, tc.waitForQuorum)
			n.write(t, peersOf(n, &testNode{ip: "127.0.0.96"}))
			dir := n.withNodeDir(t)
			leaveMarker(t, dir, "127.0.0.96")
			logs := &testutil.SyncBuffer{}
			o := n.options(t)
			o.Log = funcr.New(func(prefix, args string) { fmt.Fprintln(logs, prefix, args) }, funcr.Options{})
			sim := New(o)
			sim.recoveryTimeout = 100 * time.Millisecond
			if tc.killed {
				sim.startupPhase = time.Hour
			}
			exited, err := sim.Start(withTimeout(t))
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			t.Cleanup(func() { _ = sim.Stop(context.Background()) })
			if tc.killed {
				if err := sim.Reload(); !errors.Is(err, ErrKilledBySignal) {
					t.Fatalf("Reload during the start-up phase: %v, want ErrKilledBySignal", err)
				}
				if err := receive(t, "the killed run to end", exited); !errors.Is(err, ErrKilledBySignal) {
					t.Fatalf("killed run ended with %v", err)
				}
			} else {
				readyWithin(t, n.ip, sim)
			}
			for _, want := range tc.wantLog {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("log lacks %q:\n%s", want, logs)
				}
			}
			got, found := markerPeers(t, dir)
			if diff := cmp.Diff(tc.wantMarker, got); !found || diff != "" {
				t.Errorf("marker (exists: %v) (-want +got):\n%s", found, diff)
			}
		})
	}
}

// TestSimProcessKilledLeavesMarker checks that a process killed with SIGKILL leaves the
// unsafe-termination marker and, its flock gone with it, the session free: the next run takes
// it and recovers.
func TestSimProcessKilledLeavesMarker(t *testing.T) {
	t.Parallel()
	n := newTestNodes(t, false, "127.0.0.97")[0]
	n.withConfigLine(waitForQuorumKey, quorumRecovery)
	n.write(t, peersOf(n))
	dir := n.withNodeDir(t)
	cmd := exec.Command(testBinary(t), "-c", n.settings.IMEXConfigPath)
	cmd.Env = append(append(os.Environ(), helperChildEnv("sim")...), n.options(t).Env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	readyWithin(t, n.ip, New(n.options(t)))
	if _, found := markerPeers(t, dir); !found {
		t.Fatalf("no marker while the process runs")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if _, found := markerPeers(t, dir); !found {
		t.Fatalf("the killed process's marker is gone")
	}

	logs := &testutil.SyncBuffer{}
	o := n.options(t)
	o.Log = funcr.New(func(prefix, args string) { fmt.Fprintln(logs, prefix, args) }, funcr.Options{})
	sim := New(o)
	exited, err := sim.Start(withTimeout(t))
	if err != nil {
		t.Fatalf("Start after the kill: %v", err)
	}
	t.Cleanup(func() { _ = sim.Stop(context.Background()) })
	readyWithin(t, n.ip+" after the kill", sim)
	select {
	case err := <-exited:
		t.Fatalf("the run after the kill ended: %v", err)
	default:
	}
	if !strings.Contains(logs.String(), "ended unsafely: recovering") {
		t.Errorf("the run after the kill did not recover:\n%s", logs)
	}
	if _, err := os.Stat(filepath.Join(dir, SessionLockPath)); errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no session lock file: %v", err)
	}
}
