package imexsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"cdplane/internal/imex"
)

// startSim starts an in-process simulated IMEX for n, after applying opts to it, and stops it
// when the test ends.
func startSim(t *testing.T, n *testNode, opts ...func(*Sim)) (*Sim, <-chan error) {
	t.Helper()
	sim := New(n.options(t))
	for _, o := range opts {
		o(sim)
	}
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
		n.write(t, all)
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
	// Every unresolved name costs DNS lookups, at start and on every retry since.
	if diff := cmp.Diff(want, st, cmpopts.IgnoreFields(Status{}, "DNSLookups")); diff != "" {
		t.Errorf("status of 127.0.0.11 (-want +got):\n%s", diff)
	}

	// 127.0.0.13 leaves the clique: the others rewrite their hosts file and reload.
	start = time.Now()
	for _, n := range []*testNode{n11, n12} {
		n.write(t, all[:2])
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

// TestSimReloadKeepsRunningOnBadConfig checks that a reload that finds a hosts file the parser
// refuses keeps the previous peers. (A bad nodes.cfg cannot fail a reload: a reload does not
// read it.)
func TestSimReloadKeepsRunningOnBadConfig(t *testing.T) {
	t.Parallel()
	nodes := newTestNodes(t, true, "127.0.0.14", "127.0.0.15")
	for _, n := range nodes {
		n.write(t, peersOf(nodes...))
	}
	sim, _ := startSim(t, nodes[0])
	startSim(t, nodes[1])
	eventually(t, "the pair to connect", nodes[0].connectedTo("127.0.0.15"))

	hosts := "127.0.0.14\t" + testName(0) + "\n127.0.0.1234\t" + testName(1) + "\n"
	if err := os.WriteFile(nodes[0].settings.HostsPath, []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
	err := sim.Reload()
	checkConfigErr(t, err, &imex.ConfigError{File: nodes[0].settings.HostsPath, Line: 2,
		Text: "127.0.0.1234\t" + testName(1), Reason: "invalid IP address"})
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
		// env replaces the simulated IMEX's environment when set (default: its address as
		// this host's)
		env  []string
		want func(n *testNode) *imex.ConfigError
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
			hosts:    "127.0.0.17\t" + testName(1) + "\n",
			imexCfg:  "BIND_INTERFACE_IP=127.0.0.16\nIMEX_NODE_CONFIG_FILE=%s\n",
			want: func(n *testNode) *imex.ConfigError {
				return &imex.ConfigError{File: n.settings.NodesConfigPath, Reason: "this node's address 127.0.0.16 is " +
					"not in the node list (is its name missing from " + n.settings.HostsPath + "?)"}
			},
		},
		"invalid address in the hosts file": {
			dnsNames: true,
			hosts:    "127.0.0.16\t" + testName(0) + "\n127.0.0.1234\t" + testName(1) + "\n",
			want: func(n *testNode) *imex.ConfigError {
				return &imex.ConfigError{File: n.settings.HostsPath, Line: 2, Text: "127.0.0.1234\t" + testName(1),
					Reason: "invalid IP address"}
			},
		},
		"no bind address and no local addresses": {
			imexCfg: "IMEX_NODE_CONFIG_FILE=/nonexistent\n",
			env:     []string{},
			want: func(n *testNode) *imex.ConfigError {
				return &imex.ConfigError{File: n.settings.IMEXConfigPath, Reason: "BIND_INTERFACE_IP is empty, and the " +
					"simulated IMEX can find its own node list entry only among this host's addresses, which it is told " +
					"through CDPLANE_SIM_LOCAL_ADDRS (all of 127/8 is local on this machine); set BIND_INTERFACE_IP or " +
					"CDPLANE_SIM_LOCAL_ADDRS"}
			},
		},
		"no bind address and no local entry": {
			imexCfg: "# BIND_INTERFACE_IP=127.0.0.16\nIMEX_NODE_CONFIG_FILE=%s\n",
			nodes:   "127.0.0.17\n127.0.0.18\n",
			want: func(n *testNode) *imex.ConfigError {
				return &imex.ConfigError{File: n.settings.NodesConfigPath, Reason: "none of the node list's addresses is " +
					"local (BIND_INTERFACE_IP is empty; this host's addresses: [127.0.0.16]); is this node's name missing " +
					"from " + n.settings.HostsPath + "?"}
			},
		},
		"no bind address and two local entries": {
			imexCfg: "BIND_INTERFACE_IP=\nIMEX_NODE_CONFIG_FILE=%s\n",
			nodes:   "127.0.0.16\n127.0.0.17\n127.0.0.19\n",
			env:     []string{LocalAddrsEnv + "=127.0.0.19, 127.0.0.16"},
			want: func(n *testNode) *imex.ConfigError {
				return &imex.ConfigError{File: n.settings.NodesConfigPath, Line: 3, Text: "127.0.0.19",
					Reason: "resolves to 127.0.0.19, a local address like line 1's (127.0.0.16): with " +
						"BIND_INTERFACE_IP empty IMEX cannot tell which entry is its own"}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n := newTestNodes(t, tc.dnsNames, "127.0.0.16")[0]
			n.write(t, []imex.Peer{{NodeName: "a", IPAddress: "127.0.0.16", Index: 0}})
			if strings.Contains(tc.imexCfg, "%s") {
				tc.imexCfg = fmt.Sprintf(tc.imexCfg, n.settings.NodesConfigPath)
			}
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
			o := n.options(t)
			if tc.env != nil {
				o.Env = tc.env
			}
			_, err := New(o).Start(withTimeout(t))
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

// unresolvedFrom lists the test's names from index from up to testMaxNodes.
func unresolvedFrom(from int) []string {
	var out []string
	for i := from; i < testMaxNodes; i++ {
		out = append(out, testName(i))
	}
	return out
}

// TestSimReloadResolvesNamesOnly checks that a reload re-reads the hosts file, resolving the
// names of the node list read at start again, and does not re-read nodes.cfg: a changed
// nodes.cfg takes effect on the next start only, as with the real IMEX.
func TestSimReloadResolvesNamesOnly(t *testing.T) {
	t.Parallel()
	nodes := newTestNodes(t, true, "127.0.0.63", "127.0.0.64")
	n63, n64 := nodes[0], nodes[1]
	for _, n := range nodes {
		n.write(t, peersOf(nodes...))
	}
	noInterval := func(s *Sim) { s.reloadInterval = 0 } // every reload honoured
	sim63, exited63 := startSim(t, n63, noInterval)
	startSim(t, n64)
	eventually(t, "the pair to connect", allOf(n63.connectedTo("127.0.0.64"), n64.connectedTo("127.0.0.63")))

	// A changed hosts file is picked up: 127.0.0.64's name is no longer mapped.
	n63.write(t, peersOf(n63))
	if err := sim63.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	n63.checkReloads(t, "after the hosts file dropped 127.0.0.64", 1, 0)
	eventually(t, "the reload to drop 127.0.0.64", allOf(n63.connectedTo(), n64.connectedTo()))
	n63.write(t, peersOf(nodes...))
	if err := sim63.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	n63.checkReloads(t, "after the hosts file mapped 127.0.0.64 again", 2, 0, "127.0.0.64")
	eventually(t, "the reload to reconnect 127.0.0.64", allOf(n63.connectedTo("127.0.0.64"), n64.connectedTo("127.0.0.63")))

	// A changed nodes.cfg is not: the reload resolves the node list read at start.
	if err := os.WriteFile(n63.settings.NodesConfigPath, []byte(testName(0)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sim63.Reload(); err != nil {
		t.Fatalf("Reload after nodes.cfg changed: %v", err)
	}
	n63.checkReloads(t, "after nodes.cfg dropped 127.0.0.64's name and a reload", 3, 0, "127.0.0.64")
	if st := n63.mustStatus(t); !slices.Contains(st.Connected, "127.0.0.64") {
		t.Errorf("after nodes.cfg changed and a reload: connected to %v, want 127.0.0.64 kept", st.Connected)
	}

	// A restart reads it.
	ctx := withTimeout(t)
	if err := sim63.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := receive(t, "the stopped run to end", exited63); err != nil {
		t.Fatalf("stopped run ended with %v, want nil", err)
	}
	if _, err := sim63.Start(ctx); err != nil {
		t.Fatalf("restarting: %v", err)
	}
	eventually(t, "the restarted node to list itself only", allOf(
		func() (bool, string) {
			st, err := n63.status()
			return err == nil && len(st.Peers) == 0 && len(st.Unresolved) == 0,
				fmt.Sprintf("peers %v, unresolved %d names, err %v", st.Peers, len(st.Unresolved), err)
		},
		n63.connectedTo(),
		n64.connectedTo(),
	))
}

// TestSimReloadInterval checks that a reload within DefaultReloadInterval of the last honoured
// one is ignored (it changes nothing, returns nil and is counted) and that one at the interval
// is honoured, as the real IMEX honours SIGUSR1 at most once every 5 seconds.
func TestSimReloadInterval(t *testing.T) {
	t.Parallel()
	nodes := newTestNodes(t, true, "127.0.0.65", "127.0.0.67")
	n65, n67 := nodes[0], nodes[1]
	for _, n := range nodes {
		n.write(t, peersOf(nodes...))
	}
	clock := newTestClock()
	sim65, _ := startSim(t, n65, func(s *Sim) { s.now = clock.Now })
	startSim(t, n67)
	eventually(t, "the pair to connect", allOf(n65.connectedTo("127.0.0.67"), n67.connectedTo("127.0.0.65")))

	// The first reload is honoured.
	n65.write(t, peersOf(n65))
	if err := sim65.Reload(); err != nil {
		t.Fatalf("first Reload: %v", err)
	}
	n65.checkReloads(t, "after the first reload", 1, 0)
	eventually(t, "the first reload to drop 127.0.0.67", allOf(n65.connectedTo(), n67.connectedTo()))

	// Within the interval: ignored, twice; the ignored ones do not move the interval.
	n65.write(t, peersOf(nodes...))
	for i := range 2 {
		clock.Advance(DefaultReloadInterval/2 - time.Millisecond)
		if err := sim65.Reload(); err != nil {
			t.Fatalf("Reload within the interval: %v, want nil (ignored)", err)
		}
		n65.checkReloads(t, "after a reload within the interval", 1, i+1)
	}
	if st := n65.mustStatus(t); len(st.Connected) != 0 {
		t.Errorf("after the ignored reloads: connected to %v, want nobody (nothing changed)", st.Connected)
	}

	// At the interval since the honoured one: honoured.
	clock.Advance(2 * time.Millisecond)
	if err := sim65.Reload(); err != nil {
		t.Fatalf("Reload at the interval: %v", err)
	}
	n65.checkReloads(t, "after a reload at the interval", 2, 2, "127.0.0.67")
	eventually(t, "the honoured reload to reconnect 127.0.0.67", allOf(
		n65.connectedTo("127.0.0.67"), n67.connectedTo("127.0.0.65")))
}

// TestSimStartupPhase checks the start-up phase: the daemon answers nothing and connects to
// nobody, Stop ends it cleanly, and a reload kills the run with ErrKilledBySignal, as SIGUSR1
// kills the real IMEX before it installed its handler. Once the phase is over it connects and a
// reload is honoured.
func TestSimStartupPhase(t *testing.T) {
	t.Parallel()
	nodes := newTestNodes(t, false, "127.0.0.61", "127.0.0.62")
	n61, n62 := nodes[0], nodes[1]
	for _, n := range nodes {
		n.write(t, peersOf(nodes...))
	}
	longStartup := func(s *Sim) { s.startupPhase = time.Hour }
	sim61, exited61 := startSim(t, n61, longStartup)
	sim62, _ := startSim(t, n62)
	readyWithin(t, "127.0.0.62", sim62)
	ctx := withTimeout(t)

	// Starting up: no answer, no connection.
	if err := sim61.Ready(ctx); err == nil {
		t.Errorf("Ready during the start-up phase passed")
	}
	if st, err := n61.status(); err == nil {
		t.Errorf("status during the start-up phase answered %+v", st)
	}
	if st := n62.mustStatus(t); len(st.Connected)+len(st.Inbound) != 0 {
		t.Errorf("127.0.0.62 while 127.0.0.61 starts up: connected %v, inbound %v; want none", st.Connected, st.Inbound)
	}

	// Stop during the start-up phase is clean.
	if err := sim61.Stop(ctx); err != nil {
		t.Fatalf("Stop during the start-up phase: %v", err)
	}
	if err := receive(t, "the stopped run to end", exited61); err != nil {
		t.Fatalf("run stopped during its start-up phase ended with %v, want nil", err)
	}

	// A reload during the start-up phase kills the run.
	exited61, err := sim61.Start(ctx)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := sim61.Reload(); !errors.Is(err, ErrKilledBySignal) {
		t.Fatalf("Reload during the start-up phase: %v, want ErrKilledBySignal", err)
	}
	if err := receive(t, "the killed run to end", exited61); !errors.Is(err, ErrKilledBySignal) {
		t.Fatalf("run reloaded during its start-up phase ended with %v, want ErrKilledBySignal", err)
	}
	if err := sim61.Reload(); !errors.Is(err, imex.ErrNotRunning) {
		t.Errorf("Reload after the kill: %v, want imex.ErrNotRunning", err)
	}
	checkListenersGone(t, n61)

	// After the start-up phase it connects, and a reload is honoured.
	sim61.startupPhase = DefaultStartupPhase
	if _, err := sim61.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	readyWithin(t, "127.0.0.61", sim61)
	eventually(t, "the pair to connect", allOf(n61.connectedTo("127.0.0.62"), n62.connectedTo("127.0.0.61")))
	if err := sim61.Reload(); err != nil {
		t.Fatalf("Reload after the start-up phase: %v", err)
	}
	n61.checkReloads(t, "after a reload once ready", 1, 0, "127.0.0.62")
}
