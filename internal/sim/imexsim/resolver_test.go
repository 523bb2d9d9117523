package imexsim

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// clusterFirst is the resolv.conf the simulated kubelet writes for a ClusterFirst pod in
// namespace ns.
const clusterFirst = "search ns.svc.cluster.local svc.cluster.local cluster.local\nnameserver 127.0.0.10\noptions ndots:5\n"

func TestParseResolvConf(t *testing.T) {
	cases := map[string]struct {
		data string
		want resolvConf
	}{
		"empty": {want: resolvConf{ndots: 1}},
		"cluster first": {
			data: clusterFirst,
			want: resolvConf{search: []string{"ns.svc.cluster.local", "svc.cluster.local", "cluster.local"}, ndots: 5},
		},
		"last search wins, domain too": {
			data: "search a b\ndomain c\n",
			want: resolvConf{search: []string{"c"}, ndots: 1},
		},
		"options accumulate, ndots capped": {
			data: "options timeout:2 ndots:3\noptions attempts:2 ndots:40\n",
			want: resolvConf{ndots: 15},
		},
		"comments and junk skipped": {
			data: "# search x\n; search y\nsearch a # b\nbogus line\noptions ndots:-1 ndots:x\n",
			want: resolvConf{search: []string{"a"}, ndots: 1},
		},
		"ndots zero": {data: "options ndots:0\n", want: resolvConf{ndots: 0}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, parseResolvConf([]byte(tc.data)), cmp.AllowUnexported(resolvConf{})); diff != "" {
				t.Errorf("parseResolvConf (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResolvConfCandidates(t *testing.T) {
	cluster := parseResolvConf([]byte(clusterFirst))
	cases := map[string]struct {
		rc   resolvConf
		name string
		want []string
	}{
		"no search list": {rc: defaultResolvConf, name: "imex-0", want: []string{"imex-0"}},
		"fewer dots than ndots: suffixes first": {
			rc: cluster, name: "imex-0",
			want: []string{"imex-0.ns.svc.cluster.local", "imex-0.svc.cluster.local", "imex-0.cluster.local", "imex-0"},
		},
		"as many dots as ndots: as it is first": {
			rc: resolvConf{search: []string{"a", "b."}, ndots: 1}, name: "imex.example",
			want: []string{"imex.example", "imex.example.a", "imex.example.b"},
		},
		"absolute name": {rc: cluster, name: "imex.example.", want: []string{"imex.example."}},
		"ndots zero": {
			rc: resolvConf{search: []string{"a"}}, name: "imex", want: []string{"imex", "imex.a"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.rc.candidates(tc.name)); diff != "" {
				t.Errorf("candidates(%q) (-want +got):\n%s", tc.name, diff)
			}
		})
	}
}

// writeResolvConf writes a resolv.conf for n and points its environment at it.
func (n *testNode) writeResolvConf(t *testing.T, content string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	n.env = append(n.env, ResolvConfEnv+"="+path)
}

// TestSimDNSLookups checks the counting of simulated DNS lookups at start: every candidate of
// the resolv.conf search for a name the hosts file does not map counts one, in the run's status
// and in DNSLookups; addresses and mapped names cost none. Not parallel: it checks the
// process-wide counter exactly.
func TestSimDNSLookups(t *testing.T) {
	noRetry := func(s *Sim) { s.dnsRetryInterval = time.Hour }
	cases := map[string]struct {
		dnsNames   bool
		nodes      string // replaces nodes.cfg when set
		resolvConf string // written and named in the environment when set
		want       int
	}{
		"addresses only": {want: 0},
		"names, no resolv.conf: one lookup a name": {dnsNames: true, want: testMaxNodes - 1},
		"names, cluster-first resolv.conf: four lookups a name": {
			dnsNames: true, resolvConf: clusterFirst, want: 4 * (testMaxNodes - 1),
		},
		"addresses and names mixed": {
			nodes:      "127.0.0.71\n127.0.0.99\nimex.example\nimex-x\n",
			resolvConf: clusterFirst,
			want:       4 + 4, // imex.example has fewer dots than ndots too
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n := newTestNodes(t, tc.dnsNames, "127.0.0.71")[0]
			n.write(t, peersOf(n))
			if tc.nodes != "" {
				if err := os.WriteFile(n.settings.NodesConfigPath, []byte(tc.nodes), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.resolvConf != "" {
				n.writeResolvConf(t, tc.resolvConf)
			}
			before := DNSLookups()
			sim, _ := startSim(t, n, noRetry)
			readyWithin(t, n.ip, sim)
			if got := n.mustStatus(t).DNSLookups; got != tc.want {
				t.Errorf("Status.DNSLookups = %d, want %d", got, tc.want)
			}
			if got := DNSLookups() - before; got != int64(tc.want) {
				t.Errorf("DNSLookups() grew by %d, want %d", got, tc.want)
			}
		})
	}
}

// TestSimRetriesUnresolvedNames checks that a name the hosts file does not map is tried again,
// each retry costing its DNS lookups again, and that one the hosts file maps later resolves on
// a retry, without a reload, and is connected.
func TestSimRetriesUnresolvedNames(t *testing.T) {
	t.Parallel()
	nodes := newTestNodes(t, true, "127.0.0.73", "127.0.0.74")
	n73, n74 := nodes[0], nodes[1]
	n73.write(t, peersOf(n73)) // 127.0.0.74's name is not mapped yet
	n74.write(t, peersOf(nodes...))
	n73.writeResolvConf(t, clusterFirst)
	fastRetry := func(s *Sim) { s.dnsRetryInterval = 20 * time.Millisecond }
	sim73, _ := startSim(t, n73, fastRetry)
	startSim(t, n74)
	readyWithin(t, n73.ip, sim73)
	perTry := 4 * (testMaxNodes - 1)
	eventually(t, "retries to look the unresolved names up again", func() (bool, string) {
		st := n73.mustStatus(t)
		return st.DNSLookups >= 3*perTry, fmt.Sprintf("%d lookups", st.DNSLookups)
	})

	n73.write(t, peersOf(nodes...))
	eventually(t, "a retry to resolve 127.0.0.74's name and connect", allOf(
		n73.connectedTo("127.0.0.74"), n74.connectedTo("127.0.0.73")))
	st := n73.mustStatus(t)
	if st.Reloads != 0 || !slices.Equal(st.Peers, []string{"127.0.0.74"}) || slices.Contains(st.Unresolved, testName(1)) {
		t.Errorf("after the hosts file mapped 127.0.0.74: reloads %d, peers %v, unresolved %v; want no reload, "+
			"the peer resolved", st.Reloads, st.Peers, st.Unresolved)
	}
}
