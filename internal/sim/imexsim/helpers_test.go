package imexsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"

	"cdplane/internal/atomicfile"
	"cdplane/internal/imex"
)

// helperEnv makes the test binary act as another program when it is started as a child:
// "sim" runs Main (standing in for imex-sim, nvidia-imex and nvidia-imex-ctl), "stubborn"
// ignores SIGTERM.
const helperEnv = "CDPLANE_IMEX_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "sim":
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	case "stubborn":
		runStubborn()
	}
	os.Exit(m.Run())
}

// helperChildEnv is the environment that makes a re-executed test binary act as helper. A
// race-enabled binary sleeps a second before exiting unless told otherwise.
func helperChildEnv(helper string) []string {
	return []string{helperEnv + "=" + helper, "GORACE=atexit_sleep_ms=0"}
}

// waitTimeout bounds every wait for state; generous because the test machine may be busy.
const waitTimeout = 30 * time.Second

// eventually polls cond until it holds or waitTimeout passes; cond returns a description of
// what it saw, for the failure message.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last seen: %s", waitTimeout, what, seen)
		}
		<-tick.C
	}
}

// receive waits for one value from ch, bounded by waitTimeout.
func receive(t *testing.T, what string, ch <-chan error) error {
	t.Helper()
	select {
	case err, ok := <-ch:
		if !ok {
			t.Fatalf("%s: channel closed without a value", what)
		}
		return err
	case <-time.After(waitTimeout):
		t.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
	}
	return nil
}

// freePorts finds a server port and a command port that are free on every one of ips.
func freePorts(t *testing.T, ips ...string) (int, int) {
	t.Helper()
	for range 50 {
		var ports []int
		var probes []net.Listener
		for range 2 {
			l, err := net.Listen("tcp", net.JoinHostPort(ips[0], "0"))
			if err != nil {
				t.Fatalf("probing for a free port: %v", err)
			}
			probes = append(probes, l)
			ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		}
		for _, l := range probes {
			_ = l.Close()
		}
		if portsFreeOn(ips, ports) {
			return ports[0], ports[1]
		}
	}
	t.Fatalf("no port free on all of %v", ips)
	return 0, 0
}

func portsFreeOn(ips []string, ports []int) bool {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for _, ip := range ips {
		for _, p := range ports {
			l, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(p)))
			if err != nil {
				return false
			}
			held = append(held, l)
		}
	}
	return true
}

// testNode is one simulated node's IMEX files.
type testNode struct {
	ip string
	// settings place the files; the imexd config is the product's rendering of them.
	settings imex.Settings
	// dnsNames makes nodes.cfg list testMaxNodes names (testName) and the hosts file map the
	// peers' names; otherwise nodes.cfg lists the peers' addresses.
	dnsNames bool
	// env is added to the simulated IMEX's environment (imex.Options.Env).
	env []string
	// editConfig, when set, changes the imexd config before it is written.
	editConfig func(string) string
}

// withConfigLine makes the node's imexd config set key to value (a line replaced, or added).
func (n *testNode) withConfigLine(key, value string) *testNode {
	prev := n.editConfig
	n.editConfig = func(cfg string) string {
		if prev != nil {
			cfg = prev(cfg)
		}
		re := regexp.MustCompile(`(?m)^` + key + `=.*$`)
		if re.MatchString(cfg) {
			return re.ReplaceAllLiteralString(cfg, key+"="+value)
		}
		return cfg + key + "=" + value + "\n"
	}
	return n
}

// withNodeDir gives the node a node directory (NodeDirEnv) and returns it.
func (n *testNode) withNodeDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	n.env = append(n.env, NodeDirEnv+"="+dir)
	return dir
}

// testMaxNodes is how many names nodes.cfg lists in DNS-names mode.
const testMaxNodes = 8

// testName is the IMEX name of slot index in this package's tests.
func testName(index int) string { return fmt.Sprintf("imex-test-%04d", index) }

// newTestNodes lays out IMEX files for nodes at ips, sharing one server and command port.
func newTestNodes(t *testing.T, dnsNames bool, ips ...string) []*testNode {
	t.Helper()
	port, cmdPort := freePorts(t, ips...)
	root := t.TempDir()
	var nodes []*testNode
	for _, ip := range ips {
		dir := filepath.Join(root, ip)
		nodes = append(nodes, &testNode{ip: ip, dnsNames: dnsNames, settings: imex.Settings{
			BindIP:          ip,
			ServerPort:      port,
			CmdPort:         cmdPort,
			IMEXConfigPath:  filepath.Join(dir, "imexd.cfg"),
			NodesConfigPath: filepath.Join(dir, "nodes.cfg"),
			HostsPath:       filepath.Join(dir, "hosts"),
		}})
	}
	return nodes
}

// peersOf makes the clique members for nodes, indexed in order.
func peersOf(nodes ...*testNode) []imex.Peer {
	var peers []imex.Peer
	for i, n := range nodes {
		peers = append(peers, imex.Peer{NodeName: "node-" + n.ip, IPAddress: n.ip, Index: i})
	}
	return peers
}

// write writes the node's files for peers: the imexd config as the product renders it, and
// nodes.cfg (and in DNS-names mode the hosts file) for peers.
func (n *testNode) write(t *testing.T, peers []imex.Peer) {
	t.Helper()
	data, err := imex.RenderIMEXConfig(n.settings)
	if err != nil {
		t.Fatalf("RenderIMEXConfig(%s): %v", n.ip, err)
	}
	cfg := string(data)
	if n.editConfig != nil {
		cfg = n.editConfig(cfg)
	}
	var nodes, hosts strings.Builder
	for i := range testMaxNodes {
		if n.dnsNames {
			nodes.WriteString(testName(i) + "\n")
		}
	}
	for _, p := range peers {
		if n.dnsNames {
			fmt.Fprintf(&hosts, "%s\t%s\n", p.IPAddress, testName(p.Index))
		} else {
			nodes.WriteString(p.IPAddress + "\n")
		}
	}
	files := map[string]string{n.settings.IMEXConfigPath: cfg, n.settings.NodesConfigPath: nodes.String()}
	if n.dnsNames {
		files[n.settings.HostsPath] = "127.0.0.1\tlocalhost\n" + hosts.String()
	}
	for path, content := range files {
		if err := atomicfile.Write(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// options are the node's simulated IMEX's options: its files, and its address as this host's
// (LocalAddrsEnv) with the node's env after it.
func (n *testNode) options(t *testing.T) imex.Options {
	return imex.Options{
		ConfigPath: n.settings.IMEXConfigPath,
		HostsPath:  n.settings.HostsPath,
		Env:        append([]string{LocalAddrsEnv + "=" + n.ip}, n.env...),
		Log:        testLogger(t),
	}
}

// status asks the node's simulated IMEX for its status with a short deadline.
func (n *testNode) status() (Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return Query(ctx, n.settings.IMEXConfigPath)
}

// connectedTo reports whether the node's IMEX holds connections to exactly want, both ways.
func (n *testNode) connectedTo(want ...string) func() (bool, string) {
	return func() (bool, string) {
		st, err := n.status()
		if err != nil {
			return false, err.Error()
		}
		ok := strings.Join(st.Connected, ",") == strings.Join(want, ",") &&
			strings.Join(st.Inbound, ",") == strings.Join(want, ",")
		return ok, fmt.Sprintf("%s: connected %v, inbound %v", n.ip, st.Connected, st.Inbound)
	}
}

func testLogger(t *testing.T) logr.Logger {
	return funcr.New(func(prefix, args string) { t.Log(prefix, args) }, funcr.Options{Verbosity: 1})
}

// testBinary is the path of the running test binary, for re-executing it as a helper.
func testBinary(t *testing.T) string {
	t.Helper()
	path, err := os.Executable()
	if err != nil {
		t.Fatalf("finding the test binary: %v", err)
	}
	return path
}

func withTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// runStubborn is the "stubborn" helper: a process that ignores SIGTERM until it is killed.
func runStubborn() {
	signal.Ignore(syscall.SIGTERM)
	fmt.Println("ignoring SIGTERM")
	// Not a wait for state: a bound, so that a child the test failed to kill still goes away.
	<-time.After(time.Minute)
	os.Exit(0)
}

// checkConfigErr fails the test unless err is exactly want (nil for no error).
func checkConfigErr(t *testing.T, err error, want *imex.ConfigError) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	var got *imex.ConfigError
	if !errors.As(err, &got) {
		t.Fatalf("error %v is not a *ConfigError; want %v", err, want)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("config error (-want +got):\n%s", diff)
	}
}

// testClock is a clock that moves only when told to, for the reload interval.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock {
	return &testClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// mustStatus asks the node's simulated IMEX for its status and fails the test if it cannot.
func (n *testNode) mustStatus(t *testing.T) Status {
	t.Helper()
	st, err := n.status()
	if err != nil {
		t.Fatalf("status of %s: %v", n.ip, err)
	}
	return st
}

// checkReloads fails the test unless the node's status counts honoured and ignored reloads
// and resolves its node list to exactly peers.
func (n *testNode) checkReloads(t *testing.T, when string, honoured, ignored int, peers ...string) {
	t.Helper()
	st := n.mustStatus(t)
	type counts struct {
		Reloads, IgnoredReloads int
		Peers                   []string
		LastReloadError         string
	}
	want := counts{Reloads: honoured, IgnoredReloads: ignored, Peers: append([]string{}, peers...)}
	got := counts{Reloads: st.Reloads, IgnoredReloads: st.IgnoredReloads, Peers: st.Peers, LastReloadError: st.LastReloadError}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s, status of %s (-want +got):\n%s", when, n.ip, diff)
	}
}
