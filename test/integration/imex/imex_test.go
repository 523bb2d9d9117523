// Package imex runs the IMEX configuration the daemon writes (internal/imex, as the daemon calls
// it) under the simulated IMEX, which refuses what real IMEX refuses: each test shows a
// behaviour of real racks that an earlier rendering got wrong, next to the rendering that
// exposed it. No apiserver is involved; the daemon-level scenarios (a host IMEX holding the
// session, DNS lookups of a running domain) are in test/integration/controller.
package imex

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"cdplane/internal/imex"
	"cdplane/internal/sim/imexsim"
	"cdplane/internal/sim/nodehost"
	"cdplane/internal/testutil"
)

// node is one simulated IMEX run on the files the product renders.
type node struct {
	t        *testing.T
	settings imex.Settings
	sim      *imexsim.Sim
}

// kubeletHosts is what a pod's hosts file holds before the daemon writes to it.
const kubeletHosts = "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"

// render writes the daemon's files for a node at self (peers include it) into a fresh
// directory; edit, when set, changes the hosts file afterwards.
func render(t *testing.T, s imex.Settings, peers []imex.Peer, edit func(hosts string) string) imex.Settings {
	t.Helper()
	dir := t.TempDir()
	s.IMEXConfigPath, s.NodesConfigPath, s.HostsPath = filepath.Join(dir, "imexd.cfg"), filepath.Join(dir, "nodes.cfg"), filepath.Join(dir, "hosts")
	if err := os.WriteFile(s.HostsPath, []byte(kubeletHosts), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := imex.WriteConfig(s, peers); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		data, err := os.ReadFile(s.HostsPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(s.HostsPath, []byte(edit(string(data))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// start runs the simulated IMEX on rendered files; env adds stand-ins to the pod address, which
// is the node's only local address. It returns Start's error.
func start(t *testing.T, s imex.Settings, env ...string) (*node, error) {
	t.Helper()
	sim := imexsim.New(imex.Options{
		ConfigPath: s.IMEXConfigPath, HostsPath: s.HostsPath, Log: testr.New(t).WithValues("self", s.BindIP),
		Env: append([]string{imexsim.LocalAddrsEnv + "=" + s.BindIP}, env...),
	})
	if _, err := sim.Start(context.Background()); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = sim.Stop(ctx)
	})
	return &node{t: t, settings: s, sim: sim}, nil
}

func mustStart(t *testing.T, s imex.Settings, env ...string) *node {
	t.Helper()
	n, err := start(t, s, env...)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// query asks the node's IMEX for its state; a run still in its start-up phase does not answer
// (the zero Status).
func (n *node) query() imexsim.Status {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, _ := imexsim.Query(ctx, n.settings.IMEXConfigPath)
	return st
}

// status is query where an answer is due.
func (n *node) status() imexsim.Status {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := imexsim.Query(ctx, n.settings.IMEXConfigPath)
	if err != nil {
		n.t.Fatalf("querying the IMEX of %s: %v", n.settings.BindIP, err)
	}
	return st
}

// eventually polls cond every 100 ms until it holds or the (generous) deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, what, func() (bool, error) { return cond(), nil })
}

func settings(uid, self string) imex.Settings {
	return imex.Settings{DNSNames: true, DomainUID: uid, MaxNodes: 18, BindIP: self}
}

// TestDomainsRefuseEachOther: real IMEX accepts a peer whose node list matches its own, whatever
// domain it serves. Node a of one domain still maps its peer's slot to an address that a node b
// of another domain now holds, and b maps a's slot to a's address (stale entries, addresses
// reused). With names derived from the domain the two node lists differ and they refuse each
// other; with the same names in every domain (compute-domain-daemon-%04d, NVIDIA's and cdplane's
// earlier rendering), they connect: two domains joined into one IMEX domain.
func TestDomainsRefuseEachOther(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		uidA, uidB  string
		a, b        string
		wantConnect bool
	}{
		"names derived from the domain: refused":               {uidA: "domain-a", uidB: "domain-b", a: "127.40.1.1", b: "127.40.1.2"},
		"the same names in both domains: they connect (wrong)": {uidA: "same", uidB: "same", a: "127.40.2.1", b: "127.40.2.2", wantConnect: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := mustStart(t, render(t, settings(tc.uidA, tc.a), []imex.Peer{{NodeName: "a", IPAddress: tc.a, Index: 0}, {NodeName: "stale", IPAddress: tc.b, Index: 1}}, nil))
			b := mustStart(t, render(t, settings(tc.uidB, tc.b), []imex.Peer{{NodeName: "b", IPAddress: tc.b, Index: 1}, {NodeName: "stale", IPAddress: tc.a, Index: 0}}, nil))
			if tc.wantConnect {
				eventually(t, "a and b connected", func() bool {
					return len(a.query().Connected) == 1 && len(b.query().Connected) == 1
				})
				return
			}
			eventually(t, "a and b refuse each other's node list", func() bool {
				return a.query().RejectedPeersByReason["nodeListDiffers"] > 0 && b.query().RejectedPeersByReason["nodeListDiffers"] > 0
			})
			if sa, sb := a.status(), b.status(); len(sa.Connected)+len(sb.Connected)+len(sa.Inbound)+len(sb.Inbound) != 0 {
				t.Errorf("connections across domains: a %+v, b %+v", sa, sb)
			}
		})
	}
}

// TestEveryNameResolvesFromTheHostsFile: three members of a clique of 18 slots, resolving
// through a cluster pod's resolv.conf. The product maps every slot (empty ones to their
// sentinels): no DNS lookup, at start or on the resolver's retries. A hosts file that maps only
// the members (NVIDIA's daemon, and cdplane's before) sends each of the 15 empty slots' names
// through the search list: 4 lookups each at start, again on every retry.
func TestEveryNameResolvesFromTheHostsFile(t *testing.T) {
	t.Parallel()
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.10\nsearch drv.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	membersOnly := func(hosts string) string {
		var kept []string
		for _, line := range strings.SplitAfter(hosts, "\n") {
			if !strings.HasPrefix(line, "127.127.") {
				kept = append(kept, line)
			}
		}
		return strings.Join(kept, "")
	}
	for name, tc := range map[string]struct {
		base string
		edit func(string) string
		// atLeast: the lookups each member makes within a minute; 0: none, over a window past
		// one retry of the resolver.
		atLeast int
	}{
		"every slot mapped: no lookup":              {base: "127.40.3."},
		"members only: lookups (the old behaviour)": {base: "127.40.4.", edit: membersOnly, atLeast: 15 * 4 * 2},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var peers []imex.Peer
			for i := range 3 {
				peers = append(peers, imex.Peer{NodeName: fmt.Sprint(i), IPAddress: fmt.Sprintf("%s%d", tc.base, i+1), Index: i})
			}
			var nodes []*node
			for _, p := range peers {
				nodes = append(nodes, mustStart(t, render(t, settings("uid", p.IPAddress), peers, tc.edit), imexsim.ResolvConfEnv+"="+resolv))
			}
			eventually(t, "the members connected", func() bool {
				for _, n := range nodes {
					if st := n.query(); !st.Ready || len(st.Connected) != 2 {
						return false
					}
				}
				return true
			})
			lookups := func(ok func(int) bool) func() (bool, error) {
				return func() (bool, error) {
					for _, n := range nodes {
						if st := n.status(); !ok(st.DNSLookups) {
							return false, fmt.Errorf("%s: %d simulated DNS lookups (unresolved %d names)", n.settings.BindIP, st.DNSLookups, len(st.Unresolved))
						}
					}
					return true, nil
				}
			}
			if tc.atLeast == 0 {
				// Past one retry of the resolver: an unresolved name would have been looked up
				// twice by then.
				testutil.Consistently(t, imexsim.DefaultDNSRetryInterval+time.Second, "no simulated DNS lookup",
					lookups(func(n int) bool { return n == 0 }))
				return
			}
			testutil.Eventually(t, time.Minute, fmt.Sprintf("at least %d simulated DNS lookups by each member", tc.atLeast),
				lookups(func(n int) bool { return n >= tc.atLeast }))
		})
	}
}

// TestIMEXFindsItsOwnAddress: the product leaves BIND_INTERFACE_IP empty, as NVIDIA's daemon
// does; IMEX takes the node list entry that is one of its addresses as its own.
func TestIMEXFindsItsOwnAddress(t *testing.T) {
	t.Parallel()
	peers := []imex.Peer{{NodeName: "a", IPAddress: "127.40.5.1", Index: 0}, {NodeName: "b", IPAddress: "127.40.5.2", Index: 1}}
	a := mustStart(t, render(t, settings("uid", "127.40.5.1"), peers, nil))
	b := mustStart(t, render(t, settings("uid", "127.40.5.2"), peers, nil))
	eventually(t, "both ready and connected", func() bool {
		sa, sb := a.query(), b.query()
		return sa.Ready && sb.Ready && len(sa.Connected) == 1 && len(sb.Connected) == 1
	})
	if got := a.status().Address; got != "127.40.5.1:50000" {
		t.Errorf("a listens at %s, want its own entry's address", got)
	}
	data, err := os.ReadFile(a.settings.IMEXConfigPath)
	if err != nil || !strings.Contains(string(data), "\nBIND_INTERFACE_IP=\n") {
		t.Errorf("imexd.cfg (%v) does not leave BIND_INTERFACE_IP empty:\n%s", err, data)
	}
}

// TestOldDriversTakeAddresses: IMEX of drivers before 570.158.01 refuses names in its node list,
// which is why cdplane refuses IMEXDaemonsWithDNSNames on such a node (imex.DriverSupportsHostnames
// decides, in the kubelet plugin and the daemon); with the gate off, addresses, IMEX runs.
func TestOldDriversTakeAddresses(t *testing.T) {
	t.Parallel()
	nodeDir := t.TempDir()
	const old = "570.148.08"
	versionFile := filepath.Join(nodeDir, nodehost.DriverVersionPath)
	if err := os.MkdirAll(filepath.Dir(versionFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(versionFile, []byte(nodehost.DriverVersionFile(old)), 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, err := imex.DriverSupportsHostnames(old); ok || err != nil {
		t.Fatalf("DriverSupportsHostnames(%s) = %v, %v; want false", old, ok, err)
	}
	self := []imex.Peer{{NodeName: "a", IPAddress: "127.40.6.1", Index: 0}}
	_, err := start(t, render(t, settings("uid", "127.40.6.1"), self, nil), imexsim.NodeDirEnv+"="+nodeDir)
	if err == nil || !strings.Contains(err.Error(), imex.HostnamesMinDriverVersion) {
		t.Errorf("names on driver %s: %v, want a refusal naming %s", old, err, imex.HostnamesMinDriverVersion)
	}
	addresses := settings("uid", "127.40.6.1")
	addresses.DNSNames = false
	n := mustStart(t, render(t, addresses, self, nil), imexsim.NodeDirEnv+"="+nodeDir)
	eventually(t, "ready with addresses", func() bool { return n.query().Ready })
}
