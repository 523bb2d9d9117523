package sim

import (
	"context"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"

	"cdplane/internal/component"
	"cdplane/internal/sim/kubelet"
)

// The kubelet processes of an in-process sim serve every node exactly once, at most
// NodesPerKubelet each, and hand out pod addresses from disjoint ranges inside the pod range.
func TestKubeletShards(t *testing.T) {
	podRange := netip.MustParsePrefix(kubelet.DefaultPodCIDR)
	for _, n := range []int{6, 288, 289, 1152, 2000} {
		st := &State{Nodes: BuildNodes(Topology{Nodes: n, RackSize: 18, GPUsPerNode: 4}), InProcess: true}
		shards := st.kubeletShards()
		if shards > maxShards || (shards-1)*NodesPerKubelet >= n {
			t.Errorf("%d nodes: %d shards", n, shards)
		}
		seen := map[string]int{}
		var ranges []netip.Prefix
		for i := range shards {
			part := shardNodes(st.Nodes, i, shards)
			if len(part) > NodesPerKubelet {
				t.Errorf("%d nodes: shard %d serves %d nodes", n, i, len(part))
			}
			for _, node := range part {
				seen[node.Name]++
			}
			p := netip.MustParsePrefix(podCIDR(i))
			if !podRange.Contains(p.Addr()) || p.Bits() < podRange.Bits() {
				t.Errorf("shard %d's pod range %s is outside %s", i, p, podRange)
			}
			for _, q := range ranges {
				if q.Overlaps(p) {
					t.Errorf("pod ranges %s and %s overlap", q, p)
				}
			}
			ranges = append(ranges, p)
		}
		if len(seen) != n {
			t.Errorf("%d nodes: %d served", n, len(seen))
		}
		for name, c := range seen {
			if c != 1 {
				t.Errorf("%d nodes: %s served %d times", n, name, c)
			}
		}
	}
	if (&State{Nodes: make([]Node, 1152)}).kubeletShards() != 1 {
		t.Error("a sim whose pods run as processes has more than one kubelet process")
	}
}

// The runner is resolved before anything starts, and an in-process sim the kubelet processes
// cannot serve is refused with the limit named.
func TestRunnerChoice(t *testing.T) {
	limit := maxShards * NodesPerKubelet
	for _, c := range []struct {
		runner      string
		nodes       int
		inProcess   bool
		errContains string
	}{
		{"", 36, false, ""},
		{RunnerAuto, InProcessAbove + 1, true, ""},
		{RunnerProcess, 1152, false, ""},
		{RunnerInProcess, 6, true, ""},
		{RunnerAuto, limit, true, ""},
		{RunnerAuto, limit + 1, false, "at most 2304 nodes"},
		{RunnerInProcess, limit + 1, false, "at most 2304 nodes"},
		{"threads", 6, false, `unknown runner "threads"`},
	} {
		o := &Options{Topology: Topology{Nodes: c.nodes}, Runner: c.runner}
		got, err := o.inProcess()
		if c.errContains != "" {
			if err == nil || !strings.Contains(err.Error(), c.errContains) {
				t.Errorf("%q, %d nodes: error %v, want one containing %q", c.runner, c.nodes, err, c.errContains)
			}
			continue
		}
		if err != nil || got != c.inProcess {
			t.Errorf("%q, %d nodes: %v, %v; want %v", c.runner, c.nodes, got, err, c.inProcess)
		}
	}
}

func TestIMEXDNSLookupsSumsTheShards(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if n, err := IMEXDNSLookups(dir); n != 0 || err != nil {
		t.Errorf("no shard recorded yet: %d, %v; want 0", n, err)
	}
	for shard, count := range []string{"3\n", "40\n"} {
		if err := os.WriteFile(IMEXDNSLookupsFile(dir, shard), []byte(count), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := IMEXDNSLookups(dir); n != 43 || err != nil {
		t.Errorf("IMEXDNSLookups = %d, %v; want 43", n, err)
	}
	if err := os.WriteFile(IMEXDNSLookupsFile(dir, 2), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := IMEXDNSLookups(dir); err == nil {
		t.Error("a garbled count was summed")
	}
}

// Every in-process instance is invoked with the REST mapper the kubelet process shares.
func TestProgramsGetTheSharedMapper(t *testing.T) {
	shared := meta.NewDefaultRESTMapper(nil)
	var got []meta.RESTMapper
	p := program(shared, func(_ context.Context, inv component.Invocation) error {
		got = append(got, inv.Mapper)
		return nil
	})
	for range 2 {
		if err := p(context.Background(), nil, nil, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 2 || got[0] != meta.RESTMapper(shared) || got[1] != meta.RESTMapper(shared) {
		t.Errorf("instances got mappers %v, want the shared one twice", got)
	}
}
