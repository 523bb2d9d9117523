// Package nvmlsim is the simulated NVML of the simulated cluster: a simulated node's GPUs and
// their fabric info (Node, kept as JSON in the node's directory), in two forms:
//
//   - a real shared library, libnvidia-ml.so.1 as the NVIDIA driver installs it, built from C
//     (libnvml/nvml_sim.c, BuildLibrary) at `cdplane sim up` and installed in every simulated
//     node's driver root. It exports NVML's entry points and reads the node's readings from a
//     text spec (RenderConf, at ConfPath) at every nvmlInit, so the kubelet plugin's real NVML
//     code (package nvmlreal, go-nvml) loads and reads it as it does a GPU node's.
//   - a Go stand-in, Node.Discover, for the simulator's in-process mode: one process serves
//     hundreds of nodes there, and a process loads a shared library once, so the library could
//     not answer as each of them.
//
// Both feed the product's clique derivation (nvml.DeriveCliqueID) with the same readings, and
// the tests hold them to the same results and errors.
package nvmlsim

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"cdplane/internal/imex"
	"cdplane/internal/nvml"
)

// Backend names this backend in nvml.Result.Backend.
const Backend = "sim"

// GPUsPerNode is the GPU count Rack gives a node (a GB200 compute tray).
const GPUsPerNode = 4

// DefaultDriverVersion is the NVIDIA driver version of a simulated node whose spec names none:
// a current driver, whose IMEX accepts host names in its node list.
const DefaultDriverVersion = "580.82.07"

// RackCliqueNumber is the fabric clique id Rack gives every rack: one
// partition per rack, so racks differ by cluster UUID only.
const RackCliqueNumber uint32 = 1

// Fabric is the fabric info a simulated GPU reports.
type Fabric struct {
	// NoFabric makes the fabric info call answer ERROR_NOT_SUPPORTED; the
	// other fields must then be empty.
	NoFabric bool `json:"noFabric,omitempty"`
	// ClusterUUID is a canonical UUID; empty stands for the zero UUID.
	ClusterUUID string `json:"clusterUUID,omitempty"`
	// CliqueID is the partition within the NVLink domain.
	CliqueID uint32 `json:"cliqueID,omitempty"`
	// State is the registration state; it must be set when ClusterUUID is.
	State nvml.FabricState `json:"state"`
	// Status is the registration's NVML return code (0 is success).
	Status nvml.FabricStatus `json:"status,omitempty"`
}

// Node is a simulated node's NVML: its GPUs and their fabric info. It is a
// Discoverer; its readings go through nvml.DeriveCliqueID like real ones.
type Node struct {
	// Node names the simulated node; GPU UUIDs derive from it, so that they
	// are stable and differ between nodes.
	Node string `json:"node"`
	// GPUs is the number of GPUs.
	GPUs int `json:"gpus"`
	// Fabric is what every GPU reports, unless PerGPU says otherwise.
	Fabric Fabric `json:"fabric"`
	// PerGPU overrides Fabric for single GPUs, by index: a failed GPU, or
	// GPUs that disagree.
	PerGPU map[int]Fabric `json:"perGPU,omitempty"`
	// Unavailable makes Discover fail as if NVML could not be initialised.
	Unavailable bool `json:"unavailable,omitempty"`
	// DriverVersion is the loaded NVIDIA driver's version (as /proc/driver/nvidia/version
	// gives it, e.g. "570.133.20"); empty means DefaultDriverVersion.
	DriverVersion string `json:"driverVersion,omitempty"`
}

// Driver is the node's driver version: DriverVersion, or DefaultDriverVersion.
func (s Node) Driver() string {
	if s.DriverVersion == "" {
		return DefaultDriverVersion
	}
	return s.DriverVersion
}

// Rack returns the simulated node named node in rack rack: GPUsPerNode
// GPUs, registration completed, in the rack's clique (RackCliqueID). All nodes
// of a rack share a clique; different racks do not.
func Rack(rack int, node string) Node {
	return Node{
		Node: node,
		GPUs: GPUsPerNode,
		Fabric: Fabric{
			ClusterUUID: RackClusterUUID(rack),
			CliqueID:    RackCliqueNumber,
			State:       nvml.FabricStateCompleted,
		},
	}
}

// RackClusterUUID is the cluster UUID of simulated rack rack: ClusterUUIDOf
// of "rack-<rack>".
func RackClusterUUID(rack int) string {
	return ClusterUUIDOf(fmt.Sprintf("rack-%d", rack))
}

// RackCliqueID is the clique id every node built by Rack(rack, …) yields.
func RackCliqueID(rack int) string {
	u, _ := nvml.ParseUUID(RackClusterUUID(rack)) // well formed by construction
	return nvml.FormatCliqueID(u, RackCliqueNumber)
}

// ClusterUUIDOf derives a stable cluster UUID from a name: a version 5
// (SHA-1, RFC 9562) UUID in the namespace simNamespace.
func ClusterUUIDOf(name string) string {
	return nvml.FormatUUID(uuidV5(simNamespace, name))
}

// GPUUUID is the UUID of GPU index on simulated node node.
func GPUUUID(node string, index int) string {
	return "GPU-" + nvml.FormatUUID(uuidV5(simNamespace, fmt.Sprintf("gpu/%s/%d", node, index)))
}

// namespaceDNS is RFC 9562's DNS namespace, 6ba7b810-9dad-11d1-80b4-00c04fd430c8.
var namespaceDNS = [16]byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}

// simNamespace is the namespace of simulated UUIDs: uuidV5(DNS, "sim.cdplane").
var simNamespace = uuidV5(namespaceDNS, "sim.cdplane")

func uuidV5(namespace [16]byte, name string) [16]byte {
	h := sha1.New()
	h.Write(namespace[:])
	h.Write([]byte(name))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	return u
}

// Parse reads a Node from JSON, refusing unknown fields, and validates it.
// Example: {"node":"n1","gpus":4,"fabric":{"clusterUUID":"…","cliqueID":1,"state":"COMPLETED"}}.
func Parse(data []byte) (Node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s Node
	if err := dec.Decode(&s); err != nil {
		return Node{}, fmt.Errorf("sim spec: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Node{}, errors.New("sim spec: unexpected data after the JSON object")
	}
	if err := s.Validate(); err != nil {
		return Node{}, err
	}
	return s, nil
}

// Validate reports a spec that no real node could produce or that is ill formed.
func (s Node) Validate() error {
	if s.GPUs < 0 || s.GPUs > MaxGPUs {
		return fmt.Errorf("sim spec: gpus %d: want 0 to %d", s.GPUs, MaxGPUs)
	}
	if s.Node == "" && s.GPUs > 0 {
		return errors.New("sim spec: node must be set (GPU UUIDs derive from it)")
	}
	if s.DriverVersion != "" && !imex.IsDottedVersion(s.DriverVersion) {
		return fmt.Errorf("sim spec: driverVersion %q: want numbers separated by dots, e.g. %s", s.DriverVersion, DefaultDriverVersion)
	}
	if _, err := s.Fabric.info(); err != nil {
		return fmt.Errorf("sim spec: fabric: %w", err)
	}
	for i, f := range s.PerGPU {
		if i < 0 || i >= s.GPUs {
			return fmt.Errorf("sim spec: perGPU names GPU %d, but the node has %d GPUs", i, s.GPUs)
		}
		if _, err := f.info(); err != nil {
			return fmt.Errorf("sim spec: perGPU %d: %w", i, err)
		}
	}
	return nil
}

// info turns the spec into the raw reading NVML would give.
func (f Fabric) info() (nvml.FabricInfo, error) {
	if f.NoFabric {
		if f != (Fabric{NoFabric: true}) {
			return nvml.FabricInfo{}, errors.New("noFabric leaves no room for clusterUUID, cliqueID, state or status")
		}
		return nvml.FabricInfo{}, nil
	}
	info := nvml.FabricInfo{Supported: true, State: f.State, Status: f.Status, CliqueID: f.CliqueID}
	if f.ClusterUUID != "" {
		if f.State == nvml.FabricStateNotSupported {
			return nvml.FabricInfo{}, errors.New("state must be set when clusterUUID is")
		}
		u, err := nvml.ParseUUID(f.ClusterUUID)
		if err != nil {
			return nvml.FabricInfo{}, err
		}
		info.ClusterUUID = u
	}
	return info, nil
}

// Discover returns the simulated node's GPUs and clique, or the error a real
// node in the same state would give.
func (s Node) Discover(ctx context.Context) (nvml.Result, error) {
	res := nvml.Result{Backend: Backend}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if err := s.Validate(); err != nil {
		return res, err
	}
	if s.Unavailable {
		return res, fmt.Errorf("%w: simulated node %q has no usable NVML", nvml.ErrNVMLUnavailable, s.Node)
	}
	res.GPUs = s.readings()
	var err error
	res.CliqueID, err = nvml.DeriveCliqueID(res.GPUs)
	return res, err
}

// readings are the raw readings of a validated spec's GPUs, in index order.
func (s Node) readings() []nvml.GPU {
	gpus := make([]nvml.GPU, 0, s.GPUs)
	for i := range s.GPUs {
		f := s.Fabric
		if override, ok := s.PerGPU[i]; ok {
			f = override
		}
		info, _ := f.info() // validated
		gpus = append(gpus, nvml.GPU{Index: i, UUID: GPUUUID(s.Node, i), Fabric: info})
	}
	return gpus
}
