package imexsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cdplane/internal/imex"
)

// startSim starts an in-process simulated IMEX for n and stops it when the test ends.
func startSim(t *testing.T, n *testNode) (*Sim, <-chan error) {
	t.Helper()
	sim := New(n.options(t))
	exited, err := sim.Start(withTimeout(t))
	if err != nil {
		t.Fatalf("starting simulated IMEX on %s: %v", n.ip, err)
	}
	t.Cleanup(func() {
		if err := sim.Stop(context.Background()); err != nil {
			t.Errorf("stopping simulated IMEX on %s: %v", n.ip, err)
		}
	})
	return sim, exited
}

// TestSimClique runs three simulated IMEX daemons on 127.0.0.11-13 through a clique's life:
// they connect to each other, a membership change reloads the survivors and drops the removed
// peer, a crash ends one run with an error and a restart brings it back, and Stop ends cleanly.
func TestSimClique(t *testing.T) {
	t.Parallel()
	nodes := newTestNodes(t, true, "127.0.0.11", "127.0.0.12", "127.0.0.13")
	n11, n12, n13 := nodes[0], nodes[1], nodes[2]
	all := peersOf(n11, n12, n13)
	sims := map[*testNode]*Sim{}
	exits := map[*testNode]<-chan error{}
	for _, n := range nodes {
		if got := n.write(t, all).Action(); got != imex.ActionRestart {
			t.Fatalf("first write on %s: action %v, want Restart (a fresh start, no reload)", n.ip, got)
		}
		sims[n], exits[n] = startSim(t, n)
	}

	start := time.Now()
	eventually(t, "every node connected to the other two", allOf(
		n11.connectedTo("127.0.0.12", "127.0.0.13"),
		n12.connectedTo("127.0.0.11", "127.0.0.13"),
		n13.connectedTo("127.0.0.11", "127.0.0.12"),
	))
	t.Logf("three nodes connected in %s", time.Since(start))

	ctx := withTimeout(t)
	for _, n := range nodes {
		if err := sims[n].Ready(ctx); err != nil {
			t.Errorf("Ready on %s: %v", n.ip, err)
		}
		// The check subcommand is a separate process with a fresh value: no Start needed.
		if err := New(n.options(t)).Ready(ctx); err != nil {
			t.Errorf("Ready from a fresh value on %s: %v", n.ip, err)
		}
	}
	st, err := n11.status()
	if err != nil {
		t.Fatal(err)
	}
	want := Status{
		Ready:      true,
		Address:    "127.0.0.11:" + portOf(n11),
		Peers:      []string{"127.0.0.12", "127.0.0.13"},
		Unresolved: unresolvedFrom(3),
		Connected:  []string{"127.0.0.12", "127.0.0.13"},
		Inbound:    []string{"127.0.0.12", "127.0.0.13"},
	}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("status of 127.0.0.11 (-want +got):\n%s", diff)
	}

	// 127.0.0.13 leaves the clique: the others rewrite their hosts file and reload.
	start = time.Now()
	for _, n := range []*testNode{n11, n12} {
		if got := n.write(t, all[:2]).Action(); got != imex.ActionReload {
			t.Fatalf("membership change on %s: action %v, want Reload", n.ip, got)
		}
		if err := sims[n].Reload(); err != nil {
			t.Fatalf("Reload on %s: %v", n.ip, err)
		}
	}
	eventually(t, "127.0.0.13 dropped on both sides", allOf(
		n11.connectedTo("127.0.0.12"),
		n12.connectedTo("127.0.0.11"),
		n13.connectedTo(),
	))
	t.Logf("removed peer dropped in %s", time.Since(start))

	// 127.0.0.12 crashes on demand; its run ends with an error and 127.0.0.11 loses it.
	if err := Crash(ctx, n12.settings.IMEXConfigPath); err != nil {
		t.Fatalf("Crash: %v", err)
	}
	if err := receive(t, "the crashed run to end", exits[n12]); !errors.Is(err, ErrCrashed) {
		t.Fatalf("crashed run ended with %v, want ErrCrashed", err)
	}
	if err := sims[n12].Reload(); !errors.Is(err, imex.ErrNotRunning) {
		t.Errorf("Reload after the crash: %v, want imex.ErrNotRunning", err)
	}
	if err := sims[n12].Ready(ctx); err == nil {
		t.Errorf("Ready after the crash passed")
	}
	eventually(t, "127.0.0.11 to lose the crashed peer", n11.connectedTo())

	// The daemon restarts it; the clique heals.
	exits[n12], err = sims[n12].Start(ctx)
	if err != nil {
		t.Fatalf("restarting after the crash: %v", err)
	}
	if _, err := sims[n12].Start(ctx); !errors.Is(err, imex.ErrAlreadyRunning) {
		t.Errorf("second Start: %v, want imex.ErrAlreadyRunning", err)
	}
	eventually(t, "the restarted peer to reconnect", allOf(
		n11.connectedTo("127.0.0.12"),
		n12.connectedTo("127.0.0.11"),
	))

	// Stop ends every run cleanly.
	for _, n := range nodes {
		if err := sims[n].Stop(ctx); err != nil {
			t.Errorf("Stop on %s: %v", n.ip, err)
		}
		if err := receive(t, "the stopped run to end", exits[n]); err != nil {
			t.Errorf("stopped run on %s ended with %v, want nil", n.ip, err)
		}
	}
	checkListenersGone(t, nodes...)
}

// TestSimReloadKeepsRunningOnBadConfig checks that a refused reload keeps the previous peers.
func TestSimReloadKeepsRunningOnBadConfig(t *testing.T) {
	t.Parallel()
	nodes := newTestNodes(t, true, "127.0.0.14", "127.0.0.15")
	for _, n := range nodes {
		n.write(t, peersOf(nodes...))
	}
	sim, _ := startSim(t, nodes[0])
	startSim(t, nodes[1])
	eventually(t, "the pair to connect", nodes[0].connectedTo("127.0.0.15"))

	if err := os.WriteFile(nodes[0].settings.NodesConfigPath, []byte("compute-domain-daemon-0000\nbad line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := sim.Reload()
	checkConfigErr(t, err, &imex.ConfigError{File: nodes[0].settings.NodesConfigPath, Line: 2, Text: "bad line",
		Reason: "expected one address or name"})
	st, err := nodes[0].status()
	if err != nil {
		t.Fatal(err)
	}
	if st.Reloads != 1 || !strings.Contains(st.LastReloadError, ":2:") {
		t.Errorf("status after the refused reload: reloads %d, last error %q", st.Reloads, st.LastReloadError)
	}
	if diff := cmp.Diff([]string{"127.0.0.15"}, st.Connected); diff != "" {
		t.Errorf("connections after the refused reload (-want +got):\n%s", diff)
	}
}

// TestSimRefusesBadConfig checks that a configuration the real IMEX would refuse fails Start,
// names the line, and leaves nothing listening.
func TestSimRefusesBadConfig(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		dnsNames bool
		nodes    string // replaces nodes.cfg when set
		hosts    string // replaces the hosts file when set
		imexCfg  string // replaces the imexd config when set
		want     func(n *testNode) *imex.ConfigError
	}{
		"unparsable nodes.cfg line": {
			nodes: "127.0.0.16\n127.0.0.17 extra\n",
			want: func(n *testNode) *imex.ConfigError {
				return &imex.ConfigError{File: n.settings.NodesConfigPath, Line: 2, Text: "127.0.0.17 extra",
					Reason: "expected one address or name"}
			},
		},
		"invalid address": {
			nodes: "127.0.0.16\n127.0.0.300\n",
			want: func(n *testNode) *imex.ConfigError {
				return &imex.ConfigError{File: n.settings.NodesConfigPath, Line: 2, Text: "127.0.0.300", Reason: "invalid IP address"}
			},
		},
		"duplicate": {
			nodes: "127.0.0.16\n127.0.0.17\n127.0.0.16\n",
			want: func(n *testNode) *imex.ConfigError {
				return &imex.ConfigError{File: n.settings.NodesConfigPath, Line: 3, Text: "127.0.0.16", Reason: "duplicate of line 1"}
			},
		},
		"own name not in the hosts file": {
			dnsNames: true,
			hosts:    "127.0.0.17\tcompute-domain-daemon-0001\n",
			want: func(n *testNode) *imex.ConfigError {
				return &imex.ConfigError{File: n.settings.NodesConfigPath, Reason: "this node's address 127.0.0.16 is " +
					"not in the node list (is its name missing from " + n.settings.HostsPath + "?)"}
			},
		},
		"invalid address in the hosts file": {
			dnsNames: true,
			hosts:    "127.0.0.16\tcompute-domain-daemon-0000\n127.0.0.1234\tcompute-domain-daemon-0001\n",
			want: func(n *testNode) *imex.ConfigError {
				return &imex.ConfigError{File: n.settings.HostsPath, Line: 2, Text: "127.0.0.1234\tcompute-domain-daemon-0001",
					Reason: "invalid IP address"}
			},
		},
		"no bind address": {
			imexCfg: "IMEX_NODE_CONFIG_FILE=/nonexistent\n",
			want: func(n *testNode) *imex.ConfigError {
				return &imex.ConfigError{File: n.settings.IMEXConfigPath, Reason: "BIND_INTERFACE_IP must be set: the simulated " +
					"IMEX cannot pick its address by matching local interfaces (all of 127/8 is local)"}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n := newTestNodes(t, tc.dnsNames, "127.0.0.16")[0]
			n.write(t, []imex.Peer{{NodeName: "a", IPAddress: "127.0.0.16", Index: 0}})
			for path, content := range map[string]string{
				n.settings.NodesConfigPath: tc.nodes, n.settings.HostsPath: tc.hosts, n.settings.IMEXConfigPath: tc.imexCfg,
			} {
				if content == "" {
					continue
				}
				if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			sim := New(n.options(t))
			_, err := sim.Start(withTimeout(t))
			checkConfigErr(t, err, tc.want(n))
			checkListenersGone(t, n)
		})
	}
}

// checkListenersGone fails the test if anything still listens on a node's ports. It dials
// rather than binds: a bind can be refused while the closed server's connections linger
// (FIN_WAIT, TIME_WAIT), which says nothing about a listener; only a refused connection proves
// that no listener is left. It polls until refused: a child process that a parallel test forks
// holds copies of this process's descriptors until it execs, so a closed listener can accept a
// connection for a moment after its Close; a listener left behind accepts until the wait ends.
func checkListenersGone(t *testing.T, nodes ...*testNode) {
	t.Helper()
	for _, n := range nodes {
		for _, port := range []int{n.settings.ServerPort, n.settings.CmdPort} {
			addr := net.JoinHostPort(n.ip, strconv.Itoa(port))
			eventually(t, "nothing to listen on "+addr+" after the simulated IMEX ended", func() (bool, string) {
				conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
				if err == nil {
					_ = conn.Close()
					return false, addr + " accepts connections"
				}
				return errors.Is(err, syscall.ECONNREFUSED), fmt.Sprintf("dialling %s: %v, want connection refused", addr, err)
			})
		}
	}
}

func allOf(conds ...func() (bool, string)) func() (bool, string) {
	return func() (bool, string) {
		var seen []string
		ok := true
		for _, c := range conds {
			good, s := c()
			ok = ok && good
			seen = append(seen, s)
		}
		return ok, strings.Join(seen, "; ")
	}
}

func portOf(n *testNode) string { return strconv.Itoa(n.settings.ServerPort) }

// unresolvedFrom lists the DNS names from index from up to imex.DefaultMaxNodes.
func unresolvedFrom(from int) []string {
	var out []string
	for i := from; i < imex.DefaultMaxNodes; i++ {
		out = append(out, imex.DNSName(i))
	}
	return out
}
