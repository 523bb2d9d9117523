package imexsim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestSimOwnAddressFromNodeList checks that with BIND_INTERFACE_IP empty a simulated IMEX takes
// as its own address the node list entry that is one of this host's addresses
// (LocalAddrsEnv), listens there and is accepted by its peers.
func TestSimOwnAddressFromNodeList(t *testing.T) {
	t.Parallel()
	nodes := newTestNodes(t, true, "127.0.0.78", "127.0.0.79")
	n78, n79 := nodes[0], nodes[1]
	for _, n := range nodes {
		n.withConfigLine("BIND_INTERFACE_IP", "")
		n.write(t, peersOf(nodes...))
	}
	// More addresses than its own: only one of them is in the node list.
	n78.env = append(n78.env, LocalAddrsEnv+"=127.0.0.200,127.0.0.78")
	for _, n := range nodes {
		startSim(t, n)
	}
	eventually(t, "the pair to connect", allOf(n78.connectedTo("127.0.0.79"), n79.connectedTo("127.0.0.78")))
	if got, want := n78.mustStatus(t).Address, "127.0.0.78:"+portOf(n78); got != want {
		t.Errorf("Status.Address = %s, want %s", got, want)
	}
}

// hello dials the node's peer port from the local address from and sends line; it returns the
// answer.
func hello(t *testing.T, n *testNode, from, line string) string {
	t.Helper()
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(from), 0)), Timeout: 5 * time.Second}
	conn, err := d.Dial("tcp", net.JoinHostPort(n.ip, portOf(n)))
	if err != nil {
		t.Fatalf("dialling %s from %s: %v", n.ip, from, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(waitTimeout))
	if _, err := fmt.Fprintln(conn, line); err != nil {
		t.Fatal(err)
	}
	answer, err := readLine(conn)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", line, err)
	}
	return answer
}

// digestOf is the node list digest of entries, computed here as the protocol defines it.
func digestOf(entries ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(entries, "\n")))
	return hex.EncodeToString(sum[:])[:16]
}

// TestSimHandshake checks the listening side of the peer protocol: a peer is welcome when it
// claims its own address, is in the node list and its node list digest matches; otherwise it is
// refused, and the refusals are counted by reason.
func TestSimHandshake(t *testing.T) {
	t.Parallel()
	n := newTestNodes(t, false, "127.0.0.81")[0]
	n.write(t, peersOf(n, &testNode{ip: "127.0.0.82"}))
	sim, _ := startSim(t, n)
	readyWithin(t, n.ip, sim)
	digest := digestOf("127.0.0.81", "127.0.0.82")

	cases := []struct {
		from, line, want string
	}{
		{"127.0.0.82", "HELLO 127.0.0.82 " + digest, "WELCOME 127.0.0.81"},
		{"127.0.0.82", "HELLO 127.0.0.82 " + digestOf("127.0.0.82", "127.0.0.81"), "REJECT node list differs"},
		{"127.0.0.82", "HELLO 127.0.0.82", `REJECT bad hello "HELLO 127.0.0.82" from 127.0.0.82`},
		{"127.0.0.82", "HELLO 127.0.0.83 " + digest, `REJECT bad hello "HELLO 127.0.0.83 ` + digest + `" from 127.0.0.82`},
		{"127.0.0.83", "HELLO 127.0.0.83 " + digest, "REJECT 127.0.0.83 is not in the node list of 127.0.0.81"},
	}
	for _, tc := range cases {
		if got := hello(t, n, tc.from, tc.line); got != tc.want {
			t.Errorf("%q from %s: answer %q, want %q", tc.line, tc.from, got, tc.want)
		}
	}
	st := n.mustStatus(t)
	want := map[string]int{rejectBadHello: 2, rejectNotInNodeList: 1, rejectNodeListDiffers: 1}
	if diff := cmp.Diff(want, st.RejectedPeersByReason); diff != "" || st.RejectedPeers != 4 {
		t.Errorf("rejected peers %d, by reason (-want +got):\n%s", st.RejectedPeers, diff)
	}
}

// TestSimNodeListsMustMatch checks that daemons accept each other when their node lists are the
// same as written, even when each hosts file was written on its own (two ComputeDomains with
// the same static names), and refuse each other when the lists differ, even when the names
// resolve to the same addresses.
func TestSimNodeListsMustMatch(t *testing.T) {
	t.Parallel()
	nodes := newTestNodes(t, true, "127.0.0.85", "127.0.0.86", "127.0.0.87")
	n85, n86, n87 := nodes[0], nodes[1], nodes[2]
	for _, n := range nodes {
		n.write(t, peersOf(nodes...))
	}
	// 127.0.0.87's node list names the same addresses under other names.
	var list, hosts strings.Builder
	for i, n := range nodes {
		fmt.Fprintf(&list, "other-%04d\n", i)
		fmt.Fprintf(&hosts, "%s\tother-%04d\n", n.ip, i)
	}
	for path, content := range map[string]string{n87.settings.NodesConfigPath: list.String(), n87.settings.HostsPath: hosts.String()} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		startSim(t, n)
	}
	eventually(t, "the nodes with the same node list to connect, and to refuse the other", allOf(
		n85.connectedTo("127.0.0.86"), n86.connectedTo("127.0.0.85"), n87.connectedTo(),
		func() (bool, string) {
			var seen []string
			ok := true
			for _, n := range nodes {
				st, err := n.status()
				got := st.RejectedPeersByReason[rejectNodeListDiffers]
				ok = ok && err == nil && got > 0
				seen = append(seen, fmt.Sprintf("%s refused %d for another node list (%v)", n.ip, got, err))
			}
			return ok, strings.Join(seen, ", ")
		},
	))
}
