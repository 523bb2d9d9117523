// Package sim runs a simulated NVL72 cluster on one machine (`cdplane sim up|down`): a real
// control plane from the cached builds (package cluster), simulated nodes in racks of 18 served
// by the simulated kubelet (package kubelet) in a background process, and the prerequisites and
// planes installed through the same Helm charts users install.
package sim

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"cdplane/internal/plane"
	"cdplane/internal/sim/nvmlsim"
)

// NodeSpecLabel marks the simulated nodes.
const NodeSpecLabel = "sim.cdplane.io/node"

// Node is one simulated node, as written to the state directory for the kubelet process.
type Node struct {
	Name       string            `json:"name"`
	Rack       int               `json:"rack"`
	InternalIP string            `json:"internalIP"`
	Labels     map[string]string `json:"labels"`
	Plane      string            `json:"plane,omitempty"`
	NVML       nvmlsim.Node      `json:"nvml"`
}

// Topology is what `sim up` builds.
type Topology struct {
	Nodes       int
	RackSize    int
	GPUsPerNode int
	// FabricLess is how many nodes (the last ones) have no NVLink fabric; FailedFabric how many
	// (before those) report a failed fabric registration.
	FabricLess   int
	FailedFabric int
	// Planes share the nodes in contiguous blocks of whole racks where possible; none: the
	// legacy plane serves them all.
	Planes []string
}

// Validate checks the topology, naming the first problem.
func (t Topology) Validate() error {
	switch {
	case t.Nodes < 1 || t.Nodes > 20000:
		return fmt.Errorf("--nodes %d: want 1..20000", t.Nodes)
	case t.RackSize < 1 || t.RackSize > 72:
		return fmt.Errorf("--rack-size %d: want 1..72", t.RackSize)
	case t.GPUsPerNode < 1 || t.GPUsPerNode > 8:
		return fmt.Errorf("--gpus-per-node %d: want 1..8", t.GPUsPerNode)
	case t.FabricLess < 0 || t.FailedFabric < 0 || t.FabricLess+t.FailedFabric > t.Nodes:
		return fmt.Errorf("--fabricless %d and --failed-fabric %d: want non-negative and at most --nodes together", t.FabricLess, t.FailedFabric)
	case len(t.Planes) > t.Nodes:
		return fmt.Errorf("%d planes for %d nodes: each plane needs a node", len(t.Planes), t.Nodes)
	}
	seen := map[string]bool{}
	for _, id := range t.Planes {
		if id == "" {
			return fmt.Errorf("--planes: an empty id (the legacy plane is the default without --planes)")
		}
		if err := plane.ValidateID(id); err != nil {
			return fmt.Errorf("--planes: %w", err)
		}
		if seen[id] {
			return fmt.Errorf("--planes: %q given twice", id)
		}
		seen[id] = true
	}
	return nil
}

// BuildNodes lays the nodes out: node i is in rack i/RackSize, named r<rack>n<index>,
// with the loopback address 127.10.<i/250>.<i%250+1> (never in the pod range 127.128.0.0/9 or
// IMEX's sentinel block kubelet.IMEXSentinelPrefix), its plane's label, and simulated NVML:
// the rack's clique, no fabric for the last FabricLess nodes, a failed registration for the
// FailedFabric before them.
func BuildNodes(t Topology) []Node {
	nodes := make([]Node, t.Nodes)
	for i := range nodes {
		rack := i / t.RackSize
		// Short names: a node's directory holds Unix sockets, whose paths are limited.
		name := fmt.Sprintf("r%02dn%02d", rack, i%t.RackSize)
		ip := netip.AddrFrom4([4]byte{127, 10, byte(i / 250), byte(i%250 + 1)})
		n := Node{
			Name: name, Rack: rack, InternalIP: ip.String(),
			Labels: map[string]string{NodeSpecLabel: "true", "nvidia.com/gpu.present": "true", "sim.cdplane.io/rack": fmt.Sprint(rack)},
			NVML:   nvmlsim.Rack(rack, name),
		}
		n.NVML.GPUs = t.GPUsPerNode
		switch {
		case i >= t.Nodes-t.FabricLess:
			n.NVML.Fabric = nvmlsim.Fabric{NoFabric: true}
		case i >= t.Nodes-t.FabricLess-t.FailedFabric:
			n.NVML.Fabric.Status = 1 // NVML_ERROR_UNINITIALIZED: registration failed
		}
		if len(t.Planes) > 0 {
			n.Plane = t.Planes[planeOf(i, t)]
		}
		nodes[i] = n
	}
	return nodes
}

// planeOf splits the nodes between the planes in contiguous blocks: whole racks, each rack to
// the plane its middle node falls in (so a partial last rack does not skew the split), or, with
// fewer racks than planes, node by node.
func planeOf(i int, t Topology) int {
	racks := (t.Nodes + t.RackSize - 1) / t.RackSize
	if racks < len(t.Planes) {
		return min(i*len(t.Planes)/t.Nodes, len(t.Planes)-1)
	}
	start := i / t.RackSize * t.RackSize
	size := min(t.RackSize, t.Nodes-start)
	return min((start+size/2)*len(t.Planes)/t.Nodes, len(t.Planes)-1)
}

// Capacity of every simulated node.
func capacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods:   resource.MustParse("250"),
	}
}

// ParsePlanes splits a comma-separated --planes value.
func ParsePlanes(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	var out []string
	for _, p := range strings.Split(s, ",") {
		out = append(out, strings.TrimSpace(p))
	}
	return out
}

// longestSocket is the longest Unix socket path below a node's directory: the kubelet plugin's
// registration socket.
const longestSocket = "/var/lib/kubelet/plugins_registry/compute-domain.nvidia.com-reg.sock"

// maxSocketPath is the longest path a Unix socket can have on Linux (108 bytes with the NUL).
const maxSocketPath = 107

// CheckSocketPaths refuses a state directory under which the nodes' sockets would not fit.
func CheckSocketPaths(stateDir string, nodes []Node) error {
	longest := ""
	for _, n := range nodes {
		if len(n.Name) > len(longest) {
			longest = n.Name
		}
	}
	p := stateDir + "/nodes/" + longest + longestSocket
	if len(p) > maxSocketPath {
		return fmt.Errorf("--state-dir %s is too long: node %s's plugin socket %s would have %d characters, and Unix sockets allow %d; choose a shorter directory",
			stateDir, longest, p, len(p), maxSocketPath)
	}
	return nil
}
