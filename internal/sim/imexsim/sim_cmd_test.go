package imexsim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"cdplane/internal/imex"
)

// shortTempDir makes a directory under /tmp, whose paths stay far below the Unix domain socket
// limit (t.TempDir's hold the test's name), and removes it when the test ends.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "imx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// newUnixNode lays out IMEX files for one node at ip whose command service listens on the Unix
// domain socket it returns, and on the node's TCP command port too when withPort.
func newUnixNode(t *testing.T, ip string, withPort bool) (*testNode, string) {
	t.Helper()
	n := newTestNodes(t, false, ip)[0]
	n.write(t, peersOf(n))
	socket := filepath.Join(shortTempDir(t), "imex_ctrl.sock")
	writeUnixConfig(t, n, socket, withPort)
	return n, socket
}

// writeUnixConfig replaces the node's imexd config by one that enables the command service on
// the Unix domain socket at socket, and on the TCP command port too when withPort.
func writeUnixConfig(t *testing.T, n *testNode, socket string, withPort bool) {
	t.Helper()
	cfg := fmt.Sprintf("DAEMONIZE=0\nBIND_INTERFACE_IP=%s\nSERVER_PORT=%d\nIMEX_NODE_CONFIG_FILE=%s\n"+
		"IMEX_CMD_ENABLED=1\nIMEX_CMD_UNIX_DOMAIN_PATH=%s\n",
		n.ip, n.settings.ServerPort, n.settings.NodesConfigPath, socket)
	if withPort {
		cfg += fmt.Sprintf("IMEX_CMD_PORT=%d\n", n.settings.CmdPort)
	}
	if err := os.WriteFile(n.settings.IMEXConfigPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runMain runs Main in this process and returns its exit status and output.
func runMain(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = Main(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// leaveStaleSocket leaves a socket file at path that nothing listens on, as a killed process
// leaves its socket. The socket is bound and closed but never listened on: a listener closed
// here could still accept for a moment in a child that a parallel test forks (it holds copies of
// this process's descriptors until it execs).
func leaveStaleSocket(t *testing.T, path string) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Close(fd) }()
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		t.Fatalf("binding %s: %v", path, err)
	}
}

// readyUnixWithin polls the readiness query on the Unix domain socket until it passes: the
// simulated IMEX answers nothing during its start-up phase.
func readyUnixWithin(t *testing.T, socket string) {
	t.Helper()
	eventually(t, "the readiness query on "+socket+" to pass", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := ReadyUnix(ctx, socket)
		return err == nil, fmt.Sprint(err)
	})
}

// checkNoSocket fails the test unless nothing is left at the socket path.
func checkNoSocket(t *testing.T, socket string) {
	t.Helper()
	if fi, err := os.Lstat(socket); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s after the run ended: %v, %v; want it removed", socket, fi, err)
	}
}

// TestSimUnixSocket runs a simulated IMEX whose command service listens on a Unix domain socket
// (host-managed IMEX), alone or beside the TCP command port: the readiness query over the
// socket passes, in this process and as nvidia-imex-ctl -q --u=SOCKET, and so does the one
// through the config; once stopped, the socket file is gone and the queries fail naming it.
func TestSimUnixSocket(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		ip       string
		withPort bool
	}{
		"Unix domain socket only": {ip: "127.0.0.41"},
		"and the TCP port":        {ip: "127.0.0.42", withPort: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			n, socket := newUnixNode(t, tc.ip, tc.withPort)
			sim, exited := startSim(t, n)
			ctx := withTimeout(t)

			readyUnixWithin(t, socket)
			if err := sim.Ready(ctx); err != nil {
				t.Errorf("Ready through the config: %v", err)
			}
			st, err := QueryUnix(ctx, socket)
			if err != nil || !st.Ready || st.Address != tc.ip+":"+portOf(n) {
				t.Errorf("QueryUnix: %+v, %v; want the ready daemon at %s:%s", st, err, tc.ip, portOf(n))
			}
			if tc.withPort {
				if _, err := Query(ctx, n.settings.IMEXConfigPath); err != nil {
					t.Errorf("Query over the TCP command port beside the socket: %v", err)
				}
			}
			for _, args := range [][]string{
				{"-q", "--u=" + socket},
				{"-q", "-u", socket},
				{"-q", "-c", n.settings.IMEXConfigPath},
			} {
				code, stdout, stderr := runMain(args...)
				if code != 0 || stdout != "READY\n" || stderr != "" {
					t.Errorf("Main %q: status %d, stdout %q, stderr %q; want status 0 and READY", args, code, stdout, stderr)
				}
			}
			code, stdout, stderr := runMain("-status", "--u="+socket)
			if code != 0 || !strings.Contains(stdout, `"address": "`+tc.ip+":"+portOf(n)+`"`) {
				t.Errorf("Main -status --u: status %d, stdout %q, stderr %q; want the status as JSON", code, stdout, stderr)
			}

			if err := sim.Stop(ctx); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			if err := receive(t, "the stopped run to end", exited); err != nil {
				t.Errorf("stopped run ended with %v, want nil", err)
			}
			checkNoSocket(t, socket)
			if err := ReadyUnix(ctx, socket); err == nil || !strings.Contains(err.Error(), socket) {
				t.Errorf("ReadyUnix after Stop: %v, want an error naming %s", err, socket)
			}
			code, stdout, stderr = runMain("-q", "--u="+socket)
			if code == 0 || stdout != "" || !strings.Contains(stderr, socket) {
				t.Errorf("Main -q --u after Stop: status %d, stdout %q, stderr %q; want a failure naming %s",
					code, stdout, stderr, socket)
			}
			checkListenersGone(t, n)
		})
	}
}

// TestSimUnixSocketRemovedOnCrash checks that a crash, asked for over the socket, also removes
// the socket file.
func TestSimUnixSocketRemovedOnCrash(t *testing.T) {
	t.Parallel()
	n, socket := newUnixNode(t, "127.0.0.43", false)
	_, exited := startSim(t, n)
	readyUnixWithin(t, socket) // it answers nothing, CRASH included, during its start-up phase
	if code, _, stderr := runMain("-crash", "--u="+socket); code != 0 {
		t.Fatalf("Main -crash --u: status %d, stderr %q", code, stderr)
	}
	if err := receive(t, "the crashed run to end", exited); !errors.Is(err, ErrCrashed) {
		t.Fatalf("crashed run ended with %v, want ErrCrashed", err)
	}
	checkNoSocket(t, socket)
}

// TestSimUnixSocketAtStart checks what start does with the socket path: a socket an earlier
// run left behind is replaced; a live socket, a file of another kind or a path too long for a
// socket fails start with an error naming the path, leaves what was there alone, and leaves
// nothing listening.
func TestSimUnixSocketAtStart(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		// prepare puts something at the socket path, or picks another path.
		prepare func(t *testing.T, socket string) string
		wantErr string // empty: start succeeds
		// check runs after start and sees the socket path.
		check func(t *testing.T, socket string)
	}{
		"stale socket from an earlier run": {
			prepare: func(t *testing.T, socket string) string {
				leaveStaleSocket(t, socket)
				if fi, err := os.Lstat(socket); err != nil || fi.Mode().Type() != fs.ModeSocket {
					t.Fatalf("the stale socket: %v, %v", fi, err)
				}
				return socket
			},
			check: func(t *testing.T, socket string) {
				readyUnixWithin(t, socket)
			},
		},
		"regular file": {
			prepare: func(t *testing.T, socket string) string {
				if err := os.WriteFile(socket, []byte("keep me"), 0o644); err != nil {
					t.Fatal(err)
				}
				return socket
			},
			wantErr: "the path is taken by a file that is not a socket",
			check: func(t *testing.T, socket string) {
				if data, err := os.ReadFile(socket); err != nil || string(data) != "keep me" {
					t.Errorf("the regular file after the refused start: %q, %v; want it untouched", data, err)
				}
			},
		},
		"socket something listens on": {
			prepare: func(t *testing.T, socket string) string {
				ln, err := net.Listen("unix", socket)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = ln.Close() })
				return socket
			},
			wantErr: "another command service listens there",
			check: func(t *testing.T, socket string) {
				if fi, err := os.Lstat(socket); err != nil || fi.Mode().Type() != fs.ModeSocket {
					t.Errorf("the live socket after the refused start: %v, %v; want it untouched", fi, err)
				}
			},
		},
		"path too long for a socket": {
			prepare: func(_ *testing.T, socket string) string {
				return filepath.Join(filepath.Dir(socket), strings.Repeat("s", maxUnixPath))
			},
			wantErr: "path longer than 107 bytes",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n, socket := newUnixNode(t, "127.0.0.44", false)
			socket = tc.prepare(t, socket)
			writeUnixConfig(t, n, socket, false)
			sim := New(n.options(t))
			exited, err := sim.Start(withTimeout(t))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Start: %v", err)
				}
				t.Cleanup(func() {
					if err := sim.Stop(withTimeout(t)); err != nil {
						t.Errorf("Stop: %v", err)
					}
					if err := receive(t, "the stopped run to end", exited); err != nil {
						t.Errorf("stopped run ended with %v, want nil", err)
					}
					checkNoSocket(t, socket)
				})
			} else if err == nil || !strings.Contains(err.Error(), socket) || !strings.Contains(err.Error(), tc.wantErr) {
				_ = sim.Stop(withTimeout(t))
				t.Fatalf("Start: %v; want an error naming %s: %s", err, socket, tc.wantErr)
			}
			if tc.check != nil {
				tc.check(t, socket)
			}
			if tc.wantErr != "" {
				checkListenersGone(t, n)
			}
		})
	}
}

// TestSimCmdServiceNeedsAnAddress checks that IMEX_CMD_ENABLED=1 without a port or a socket is
// refused, and a query through such a config says why.
func TestSimCmdServiceNeedsAnAddress(t *testing.T) {
	t.Parallel()
	n := newTestNodes(t, false, "127.0.0.45")[0]
	n.write(t, peersOf(n))
	cfg := fmt.Sprintf("BIND_INTERFACE_IP=%s\nSERVER_PORT=%d\nIMEX_NODE_CONFIG_FILE=%s\nIMEX_CMD_ENABLED=1\n",
		n.ip, n.settings.ServerPort, n.settings.NodesConfigPath)
	if err := os.WriteFile(n.settings.IMEXConfigPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := New(n.options(t)).Start(withTimeout(t))
	checkConfigErr(t, err, &imex.ConfigError{File: n.settings.IMEXConfigPath,
		Reason: "IMEX_CMD_ENABLED=1 needs IMEX_CMD_PORT or IMEX_CMD_UNIX_DOMAIN_PATH"})
	checkListenersGone(t, n)
	code, _, stderr := runMain("-q", "-c", n.settings.IMEXConfigPath)
	if code != 1 || !strings.Contains(stderr, "IMEX_CMD_UNIX_DOMAIN_PATH") {
		t.Errorf("Main -q -c: status %d, stderr %q; want status 1 saying the command service is off", code, stderr)
	}
}

// TestMainSocketOnlyForQueries checks that -u without a query mode is refused before anything
// starts.
func TestMainSocketOnlyForQueries(t *testing.T) {
	t.Parallel()
	code, _, stderr := runMain("-u", "/nonexistent/imex_ctrl.sock", "-c", "/nonexistent/config.cfg")
	if code != 2 || !strings.Contains(stderr, "-u is for queries only") {
		t.Errorf("Main -u without a query: status %d, stderr %q; want status 2 saying -u is for queries", code, stderr)
	}
}

// TestMainRefusesNegativeDurations checks that a negative start-up phase or reload interval is
// refused before anything starts.
func TestMainRefusesNegativeDurations(t *testing.T) {
	t.Parallel()
	for _, flag := range []string{"-startup-phase=-1s", "-reload-interval=-1s"} {
		code, _, stderr := runMain(flag, "-c", "/nonexistent/config.cfg")
		if code != 2 || !strings.Contains(stderr, "must not be negative") {
			t.Errorf("Main %s: status %d, stderr %q; want status 2 saying it must not be negative", flag, code, stderr)
		}
	}
}
