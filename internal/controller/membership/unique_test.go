package membership

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"

	cdv1beta1 "cdplane/api/v1beta1"
)

// status.nodes and a clique's daemons are atomic lists: the API server does not check that
// node names are unique in them, as it did for the map-typed lists NVIDIA's CRD declares. The
// controller's membership must hold it by construction, whatever the input holds: duplicate
// entries (an entry in a clique and in status.nodes, or in two cliques after a node's clique
// changed), several pods on one node, addresses shared by several nodes.

// checkUnique fails t when a node is listed twice anywhere the controller writes: across the
// cliques and the fabric-less entries, within one clique, or in the aggregated status.nodes;
// or when two entries of a clique share an index, or two listed entries an address.
func checkUnique(t *testing.T, in Input, res Result) {
	t.Helper()
	seen := map[string]string{}
	note := func(node, where string) {
		if prev, dup := seen[node]; dup {
			t.Errorf("node %s listed twice: in %s and in %s (input %+v)", node, prev, where, in)
		}
		seen[node] = where
	}
	for id, entries := range res.Cliques {
		indexes := map[int]string{}
		for _, e := range entries {
			note(e.NodeName, "clique "+id)
			if e.CliqueID != id {
				t.Errorf("clique %s holds an entry of clique %q: %+v", id, e.CliqueID, e)
			}
			if other, dup := indexes[e.Index]; dup {
				t.Errorf("clique %s: index %d held by %s and %s", id, e.Index, other, e.NodeName)
			}
			indexes[e.Index] = e.NodeName
			if e.Index < 0 || e.Index >= in.MaxNodes {
				t.Errorf("clique %s: %s has index %d, outside [0,%d)", id, e.NodeName, e.Index, in.MaxNodes)
			}
		}
	}
	for _, e := range res.Fabricless {
		note(e.NodeName, "the fabric-less entries")
	}
	st := Aggregate(res, 0, 1, nil)
	names, addresses := sets.New[string](), map[string]string{}
	for _, n := range st.Nodes {
		if names.Has(n.Name) {
			t.Errorf("status.nodes lists %s twice", n.Name)
		}
		names.Insert(n.Name)
		if n.IPAddress == "" {
			continue
		}
		if other, dup := addresses[n.IPAddress]; dup {
			t.Errorf("status.nodes: address %s given to %s and %s", n.IPAddress, other, n.Name)
		}
		addresses[n.IPAddress] = n.Name
	}
	summaries := sets.New[string]()
	for _, c := range st.Cliques {
		if summaries.Has(c.ID) {
			t.Errorf("status.cliques lists clique %s twice", c.ID)
		}
		summaries.Insert(c.ID)
	}
	if int(st.TotalNodes) != len(seen) {
		t.Errorf("status.totalNodes is %d, %d distinct nodes listed", st.TotalNodes, len(seen))
	}
}

func TestComputeListsEachNodeOnce(t *testing.T) {
	cases := map[string]Input{
		"an entry in two cliques and a pod in a third": {
			Existing: []Entry{entry("n1", "127.0.0.1", c1, 0, true), entry("n1", "127.0.0.1", c2, 0, true)},
			Pods:     []Pod{pod("n1", "127.0.0.1", "uuid-c.1", true)},
		},
		"an entry twice in one clique with two indexes": {
			Existing: []Entry{entry("n1", "127.0.0.1", c1, 0, true), entry("n1", "127.0.0.1", c1, 3, true), entry("n2", "127.0.0.2", c1, 3, true)},
			Pods:     []Pod{pod("n1", "127.0.0.1", c1, true), pod("n2", "127.0.0.2", c1, true)},
		},
		"several pods on one node, in different cliques": {
			Pods: []Pod{pod("n1", "127.0.0.1", c1, true), pod("n1", "127.0.0.9", c2, false), pod("n1", "127.0.0.8", "", true), pod("n2", "127.0.0.2", c1, true)},
		},
		"a fabric-less entry and a clique entry of one node": {
			Existing: []Entry{entry("n1", "127.0.0.1", "", cdv1beta1.FabriclessIndex, true), entry("n1", "127.0.0.1", c1, 1, true)},
			Pods:     []Pod{pod("n1", "127.0.0.1", "", true)},
		},
		"two nodes with one address": {
			Existing: []Entry{entry("n1", "127.0.0.1", c1, 0, true)},
			Pods:     []Pod{pod("n1", "127.0.0.1", c1, true), pod("n2", "127.0.0.1", c1, true), pod("n3", "127.0.0.1", "", true)},
		},
	}
	for name, in := range cases {
		for _, statusOnly := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/statusOnly=%v", name, statusOnly), func(t *testing.T) {
				in.StatusOnly = statusOnly
				in.MaxNodes = 18
				in.LabelledNodes, in.AllocatedNodes = sets.New[string](), sets.New[string]()
				for _, p := range in.Pods {
					in.LabelledNodes.Insert(p.NodeName)
					in.AllocatedNodes.Insert(p.NodeName)
				}
				for _, e := range in.Existing {
					in.LabelledNodes.Insert(e.NodeName)
					in.AllocatedNodes.Insert(e.NodeName)
				}
				res := Compute(in)
				if len(res.All()) == 0 {
					t.Fatalf("no member at all: the case tests nothing (%+v)", res)
				}
				checkUnique(t, in, res)
			})
		}
	}
}

// FuzzComputeListsEachNodeOnce feeds Compute inputs drawn from the fuzzer's bytes: a few node
// names, cliques and addresses, so that duplicates of every kind are frequent. Each byte
// triple is an existing entry or a pod; flags pick labelled, allocated, ready, terminating.
func FuzzComputeListsEachNodeOnce(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8}, uint8(3))
	f.Add([]byte{1, 1, 1, 1, 1, 1, 0x81, 0x81, 0x81}, uint8(1))
	f.Add([]byte{0x10, 0x22, 0x34, 0x46, 0x58, 0x6a, 0x7c, 0x8e, 0x90, 0xa2, 0xb4, 0xc6}, uint8(2))
	cliques := []string{"", c1, c2, "uuid-c.1", "not a clique id"}
	f.Fuzz(func(t *testing.T, data []byte, maxNodes uint8) {
		in := Input{
			MaxNodes:       int(maxNodes%4) + 1,
			LabelledNodes:  sets.New[string](),
			AllocatedNodes: sets.New[string](),
			StatusOnly:     len(data)%2 == 1,
		}
		for i := 0; i+2 < len(data) && i < 3*64; i += 3 {
			a, b, c := data[i], data[i+1], data[i+2]
			node := fmt.Sprintf("n%d", a%8)
			clique := cliques[int(b)%len(cliques)]
			ip := fmt.Sprintf("127.0.0.%d", c%6)
			if a&0x08 == 0 {
				in.LabelledNodes.Insert(node)
			}
			if a&0x10 == 0 {
				in.AllocatedNodes.Insert(node)
			}
			if a&0x80 != 0 {
				in.Existing = append(in.Existing, Entry{NodeName: node, IPAddress: ip, CliqueID: clique, Index: int(b>>4) - 2, Status: status(c&0x40 != 0)})
				continue
			}
			in.Pods = append(in.Pods, Pod{
				NodeName: node, IP: ip, CliqueID: clique, Labelled: b&0x40 == 0, Ready: c&0x40 != 0,
				Terminating: c&0x80 != 0, Created: t0.Add(time.Duration(c) * time.Second), Owned: a&0x20 == 0,
			})
		}
		checkUnique(t, in, Compute(in))
	})
}
