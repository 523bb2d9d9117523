package sim

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cdplane/internal/sim/kubelet"
	"cdplane/internal/sim/nvmlsim"
)

func TestBuildNodes(t *testing.T) {
	nodes := BuildNodes(Topology{Nodes: 7, RackSize: 3, GPUsPerNode: 2, FabricLess: 1, FailedFabric: 1, Planes: []string{"a", "b"}})
	var names, ips, planes []string
	for _, n := range nodes {
		names = append(names, n.Name)
		ips = append(ips, n.InternalIP)
		planes = append(planes, n.Plane)
	}
	if diff := cmp.Diff([]string{"r00n00", "r00n01", "r00n02", "r01n00", "r01n01", "r01n02", "r02n00"}, names); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	if ips[0] != "127.10.0.1" || ips[6] != "127.10.0.7" {
		t.Errorf("addresses %v", ips)
	}
	// Three racks, two planes: whole racks, the first plane gets rack 0, the second racks 1-2.
	if diff := cmp.Diff([]string{"a", "a", "a", "b", "b", "b", "b"}, planes); diff != "" {
		t.Errorf("planes (-want +got):\n%s", diff)
	}
	if nodes[0].NVML.GPUs != 2 || nodes[0].NVML.Fabric.ClusterUUID != nvmlsim.RackClusterUUID(0) || nodes[3].NVML.Fabric.ClusterUUID != nvmlsim.RackClusterUUID(1) {
		t.Errorf("racks' fabrics: %+v, %+v", nodes[0].NVML, nodes[3].NVML)
	}
	if !nodes[6].NVML.Fabric.NoFabric || nodes[5].NVML.Fabric.Status == 0 || nodes[4].NVML.Fabric.Status != 0 {
		t.Errorf("fabric-less and failed nodes: %+v %+v %+v", nodes[4].NVML.Fabric, nodes[5].NVML.Fabric, nodes[6].NVML.Fabric)
	}
	for _, n := range nodes {
		if err := n.NVML.Validate(); err != nil {
			t.Errorf("node %s: %v", n.Name, err)
		}
	}
}

func TestTopologyValidate(t *testing.T) {
	ok := Topology{Nodes: 36, RackSize: 18, GPUsPerNode: 4}
	for name, tc := range map[string]struct {
		mod  func(*Topology)
		want string
	}{
		"defaults":               {func(*Topology) {}, ""},
		"no nodes":               {func(t *Topology) { t.Nodes = 0 }, "--nodes 0"},
		"rack size":              {func(t *Topology) { t.RackSize = 0 }, "--rack-size 0"},
		"too many broken":        {func(t *Topology) { t.FabricLess, t.FailedFabric = 30, 10 }, "--fabricless 30 and --failed-fabric 10"},
		"bad plane id":           {func(t *Topology) { t.Planes = []string{"Plane-A"} }, "--planes"},
		"reserved plane id":      {func(t *Topology) { t.Planes = []string{"default"} }, "reserved"},
		"duplicate plane":        {func(t *Topology) { t.Planes = []string{"a", "a"} }, `"a" given twice`},
		"more planes than nodes": {func(t *Topology) { t.Nodes = 1; t.Planes = []string{"a", "b"} }, "2 planes for 1 nodes"},
	} {
		t.Run(name, func(t *testing.T) {
			top := ok
			tc.mod(&top)
			err := top.Validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestCheckSocketPaths(t *testing.T) {
	nodes := BuildNodes(Topology{Nodes: 36, RackSize: 18, GPUsPerNode: 4})
	if err := CheckSocketPaths("/tmp/cdplane-sim-1000", nodes); err != nil {
		t.Errorf("default directory refused: %v", err)
	}
	err := CheckSocketPaths("/tmp/a-rather-long-directory-name-for-a-sim", nodes)
	if err == nil || !strings.Contains(err.Error(), "is too long") {
		t.Errorf("a long directory: %v, want a refusal", err)
	}
}

// No node and no pod range of the largest simulated cluster lies in IMEX's sentinel block, and
// node addresses are unique loopback addresses outside the pod ranges.
func TestAddressesAvoidIMEXSentinels(t *testing.T) {
	pods := netip.MustParsePrefix(kubelet.DefaultPodCIDR)
	for shard := range maxShards {
		if p := netip.MustParsePrefix(podCIDR(shard)); p.Overlaps(kubelet.IMEXSentinelPrefix) || !pods.Contains(p.Addr()) {
			t.Errorf("pod range of shard %d: %s, want it inside %s, outside %s", shard, p, pods, kubelet.IMEXSentinelPrefix)
		}
	}
	top := Topology{Nodes: 20000, RackSize: 72, GPUsPerNode: 4}
	if err := top.Validate(); err != nil {
		t.Fatalf("the largest topology: %v", err)
	}
	seen := map[netip.Addr]bool{}
	for _, n := range BuildNodes(top) {
		ip := netip.MustParseAddr(n.InternalIP)
		if seen[ip] || !ip.IsLoopback() || kubelet.IMEXSentinelPrefix.Contains(ip) || pods.Contains(ip) {
			t.Fatalf("node %s: address %s repeated, not loopback, a sentinel or a pod's", n.Name, ip)
		}
		seen[ip] = true
	}
}
