package daemon

import (
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"

	"cdplane/internal/imex"
)

func TestUsablePeers(t *testing.T) {
	at := func(p imex.Peer, ip string) imex.Peer { p.IPAddress = ip; return p }
	indexed := func(p imex.Peer, i int) imex.Peer { p.Index = i; return p }
	cases := map[string]struct {
		ipMode      bool
		peers       []imex.Peer
		wantKept    []imex.Peer
		wantSkipped []skippedPeer
	}{
		"no conflict: everyone, by index": {
			peers:    []imex.Peer{peer(3), peer(1), peer(2)},
			wantKept: []imex.Peer{peer(1), peer(2), peer(3)},
		},
		"two peers share an address: both left out, the rest kept": {
			peers:    []imex.Peer{peer(1), peer(2), at(peer(3), "127.0.0.2"), peer(4)},
			wantKept: []imex.Peer{peer(1), peer(4)},
			wantSkipped: []skippedPeer{
				{NodeName: "n2", Reason: "address 127.0.0.2 shared by nodes n2, n3"},
				{NodeName: "n3", Reason: "address 127.0.0.2 shared by nodes n2, n3"},
			},
		},
		"a peer shares this node's address: this node kept, the peer left out": {
			peers:       []imex.Peer{at(peer(2), "127.0.0.1"), peer(1), peer(3)},
			wantKept:    []imex.Peer{peer(1), peer(3)},
			wantSkipped: []skippedPeer{{NodeName: "n2", Reason: "address 127.0.0.1 shared by nodes n1, n2"}},
		},
		"the same address written differently is the same address": {
			peers:    []imex.Peer{peer(1), at(peer(2), "::ffff:7f00:3"), at(peer(3), "::ffff:127.0.0.3")},
			wantKept: []imex.Peer{peer(1)},
			wantSkipped: []skippedPeer{
				{NodeName: "n2", Reason: "address ::ffff:127.0.0.3 shared by nodes n2, n3"},
				{NodeName: "n3", Reason: "address ::ffff:127.0.0.3 shared by nodes n2, n3"},
			},
		},
		"IP mode: a shared address is a conflict too": {
			ipMode:   true,
			peers:    []imex.Peer{peer(1), peer(2), at(peer(3), "127.0.0.2")},
			wantKept: []imex.Peer{peer(1)},
			wantSkipped: []skippedPeer{
				{NodeName: "n2", Reason: "address 127.0.0.2 shared by nodes n2, n3"},
				{NodeName: "n3", Reason: "address 127.0.0.2 shared by nodes n2, n3"},
			},
		},
		"two peers share an index: both left out": {
			peers:    []imex.Peer{peer(1), peer(2), indexed(peer(3), 1)},
			wantKept: []imex.Peer{peer(1)},
			wantSkipped: []skippedPeer{
				{NodeName: "n2", Reason: "index 1 shared by nodes n2, n3"},
				{NodeName: "n3", Reason: "index 1 shared by nodes n2, n3"},
			},
		},
		"IP mode: indexes do not matter": {
			ipMode:   true,
			peers:    []imex.Peer{peer(1), peer(2), indexed(peer(3), 1), indexed(peer(4), 99)},
			wantKept: []imex.Peer{peer(1), peer(2), indexed(peer(3), 1), indexed(peer(4), 99)},
		},
		"a bad address or an index out of range: that peer left out": {
			peers:    []imex.Peer{peer(1), at(peer(2), "not-an-ip"), indexed(peer(3), 18), peer(4)},
			wantKept: []imex.Peer{peer(1), peer(4)},
			wantSkipped: []skippedPeer{
				{NodeName: "n2", Reason: `address "not-an-ip" does not parse`},
				{NodeName: "n3", Reason: "index 18 is outside [0, 18)"},
			},
		},
		"a peer whose daemon is gone (no address): absent, not a conflict": {
			peers:    []imex.Peer{peer(1), at(peer(2), ""), peer(3)},
			wantKept: []imex.Peer{peer(1), peer(3)},
		},
		"an address in the sentinel block: that peer left out": {
			peers:       []imex.Peer{peer(1), at(peer(2), "127.127.0.2"), peer(3)},
			wantKept:    []imex.Peer{peer(1), peer(3)},
			wantSkipped: []skippedPeer{{NodeName: "n2", Reason: "address 127.127.0.2 is in the sentinel block 127.127.0.0/16"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			kept, skipped := usablePeers(!tc.ipMode, 18, "n1", tc.peers)
			if diff := cmp.Diff(tc.wantKept, kept); diff != "" {
				t.Errorf("kept (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantSkipped, skipped); diff != "" {
				t.Errorf("skipped (-want +got):\n%s", diff)
			}
			// What is kept always renders: one bad entry never stops the clique.
			s := imex.Settings{DNSNames: !tc.ipMode, DomainUID: testUID, MaxNodes: 18, BindIP: "127.0.0.1"}
			if _, err := imex.RenderNodesConfig(s, kept); err != nil {
				t.Errorf("the kept peers do not render: %v", err)
			}
		})
	}
}

// logLines collects the lines a logger wrote at V(0).
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(_, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{Verbosity: 0})
}

func (l *logLines) matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// Two peers report the same address: IMEX still starts, with every other peer in its hosts
// file, and the conflict is logged once with the nodes' names, not on every membership event.
func TestSupervisorSkipsPeersSharingAnAddress(t *testing.T) {
	shared := peer(3)
	shared.IPAddress = peer(2).IPAddress
	for name, dnsNames := range map[string]bool{"DNS names": true, "IP addresses": false} {
		t.Run(name, func(t *testing.T) {
			logs := &logLines{}
			h := start(t, setup{dnsNames: dnsNames, log: logs.logger()}, peer(1), peer(2), shared, peer(4))
			h.firstStart()
			h.settle()
			h.poke()
			h.settle()
			h.expectNoCalls()

			want := []string{"127.0.0.1\n127.0.0.4\n"}
			path := h.cfg.NodesConfigPath()
			if dnsNames {
				// n2's and n3's slots map to their sentinels, like every unused slot.
				want = []string{"127.0.0.1\t" + imexName(0) + "\n", imex.SentinelAddr(1).String() + "\t" + imexName(1) + "\n",
					imex.SentinelAddr(2).String() + "\t" + imexName(2) + "\n", "127.0.0.4\t" + imexName(3) + "\n"}
				path = h.cfg.HostsPath
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range want {
				if !strings.Contains(string(got), w) || strings.Contains(string(got), "127.0.0.2") {
					t.Errorf("%s:\n%s\nwant n1 and n4 only, with:\n%s", path, got, w)
				}
			}
			logged := logs.matching("Leaving clique entries out of the IMEX configuration")
			if len(logged) != 1 || !strings.Contains(logged[0], `"n2"`) || !strings.Contains(logged[0], `"n3"`) {
				t.Errorf("conflict logged %d times (%q), want once naming n2 and n3", len(logged), logged)
			}

			// The conflict resolves: n2 comes back, and a new conflict would be logged again.
			h.view.set(peer(1), peer(2), peer(4))
			h.poke()
			if dnsNames {
				h.expectCalls("Reload")
			} else {
				h.expectCalls("Stop", "Start")
			}
		})
	}
}
