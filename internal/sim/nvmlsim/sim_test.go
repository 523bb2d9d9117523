package nvmlsim

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cdplane/internal/nvml"
)

// Expected values computed independently with Python:
// uuid.uuid5(uuid.uuid5(uuid.NAMESPACE_DNS, "sim.cdplane"), "rack-0") and so on.
const (
	rack0ClusterUUID = "7ff2eff4-c69a-58e9-a3c7-5790858155b6"
	rack1ClusterUUID = "6092a67c-b17b-5fc2-ad4c-5b8ee6101d02"
	rack7ClusterUUID = "44ead8ab-cfd0-5db3-8cb0-7465b283b2cb"
	nodeAGPU0UUID    = "GPU-baf94112-6428-5dec-b2f6-e9520e11834c"
	nodeAGPU1UUID    = "GPU-4835810b-34db-5d3f-8771-0a883ea5e8c4"
)

func TestSimUUIDs(t *testing.T) {
	got := map[string]string{
		"rack 0":       RackClusterUUID(0),
		"rack 1":       RackClusterUUID(1),
		"rack 7":       RackClusterUUID(7),
		"rack 0 id":    RackCliqueID(0),
		"node-a GPU 0": GPUUUID("node-a", 0),
		"node-a GPU 1": GPUUUID("node-a", 1),
	}
	want := map[string]string{
		"rack 0":       rack0ClusterUUID,
		"rack 1":       rack1ClusterUUID,
		"rack 7":       rack7ClusterUUID,
		"rack 0 id":    rack0ClusterUUID + ".1",
		"node-a GPU 0": nodeAGPU0UUID,
		"node-a GPU 1": nodeAGPU1UUID,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("simulated UUIDs (-want +got):\n%s", diff)
	}
}

func TestSimDiscover(t *testing.T) {
	rack0 := func(mutate func(*Node)) Node {
		s := Rack(0, "node-a")
		if mutate != nil {
			mutate(&s)
		}
		return s
	}
	cases := map[string]struct {
		sim        Node
		wantID     string
		wantGPUs   int
		wantErrAs  any // pointer to the error type expected
		wantIs     error
		wantErrMsg string // substring
	}{
		"rack node": {
			sim:      rack0(nil),
			wantID:   rack0ClusterUUID + ".1",
			wantGPUs: GPUsPerNode,
		},
		"other rack": {
			sim:      Rack(7, "node-z"),
			wantID:   rack7ClusterUUID + ".1",
			wantGPUs: GPUsPerNode,
		},
		"fabric-less node": {
			sim:      Node{Node: "cpu-gpu", GPUs: 2, Fabric: Fabric{NoFabric: true}},
			wantGPUs: 2,
		},
		"zero cluster UUID": {
			sim:      Node{Node: "n", GPUs: 1, Fabric: Fabric{State: nvml.FabricStateCompleted, CliqueID: 3}},
			wantGPUs: 1,
		},
		"no GPUs": {
			sim: Node{Node: "n"},
		},
		"registration not started": {
			sim:        rack0(func(s *Node) { s.Fabric.State = nvml.FabricStateNotStarted }),
			wantGPUs:   GPUsPerNode,
			wantErrAs:  new(*nvml.NotReadyError),
			wantIs:     nvml.ErrFabricNotReady,
			wantErrMsg: "GPU 0 (" + nodeAGPU0UUID + "): NVLink fabric registration not finished (state NOT_STARTED)",
		},
		"registration in progress on one nvml.GPU": {
			sim: rack0(func(s *Node) {
				f := s.Fabric
				f.State = nvml.FabricStateInProgress
				s.PerGPU = map[int]Fabric{1: f}
			}),
			wantGPUs:   GPUsPerNode,
			wantErrAs:  new(*nvml.NotReadyError),
			wantIs:     nvml.ErrFabricNotReady,
			wantErrMsg: "GPU 1 (" + nodeAGPU1UUID + ")",
		},
		"registration failed": {
			sim:        rack0(func(s *Node) { s.Fabric.Status = 15 }),
			wantGPUs:   GPUsPerNode,
			wantErrAs:  new(*nvml.FabricError),
			wantIs:     nvml.ErrFabricFailed,
			wantErrMsg: "NVLink fabric registration failed: state COMPLETED, status ERROR_GPU_IS_LOST",
		},
		"disagreeing GPUs": {
			sim: rack0(func(s *Node) {
				f := s.Fabric
				f.ClusterUUID = rack1ClusterUUID
				s.PerGPU = map[int]Fabric{3: f}
			}),
			wantGPUs:   GPUsPerNode,
			wantErrAs:  new(*nvml.MismatchError),
			wantIs:     nvml.ErrFabricFailed,
			wantErrMsg: `GPU 0 (` + nodeAGPU0UUID + `) is in clique "` + rack0ClusterUUID + `.1", GPU 3`,
		},
		"NVML unavailable": {
			sim:        rack0(func(s *Node) { s.Unavailable = true }),
			wantIs:     nvml.ErrNVMLUnavailable,
			wantErrMsg: `NVML cannot be initialised: simulated node "node-a"`,
		},
		"invalid spec": {
			sim:        Node{GPUs: 2},
			wantErrMsg: "node must be set",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			res, err := tc.sim.Discover(context.Background())
			if res.CliqueID != tc.wantID {
				t.Errorf("clique id = %q, want %q", res.CliqueID, tc.wantID)
			}
			if res.Backend != Backend {
				t.Errorf("backend = %q, want %q", res.Backend, Backend)
			}
			if len(res.GPUs) != tc.wantGPUs {
				t.Errorf("got %d GPUs, want %d", len(res.GPUs), tc.wantGPUs)
			}
			if tc.wantErrMsg == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tc.wantErrMsg != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErrMsg)) {
				t.Errorf("error = %v, want it to contain %q", err, tc.wantErrMsg)
			}
			if tc.wantErrAs != nil && !errors.As(err, tc.wantErrAs) {
				t.Errorf("error %v (%T) is not a %T", err, err, tc.wantErrAs)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("errors.Is(%v, %v) = false", err, tc.wantIs)
			}
		})
	}
}

func TestSimRackNodesShareClique(t *testing.T) {
	ids := map[string]string{}
	for _, n := range []struct {
		rack int
		node string
	}{{0, "r0-n0"}, {0, "r0-n1"}, {1, "r1-n0"}, {1, "r1-n1"}} {
		res, err := Rack(n.rack, n.node).Discover(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", n.node, err)
		}
		ids[n.node] = res.CliqueID
	}
	want := map[string]string{
		"r0-n0": rack0ClusterUUID + ".1", "r0-n1": rack0ClusterUUID + ".1",
		"r1-n0": rack1ClusterUUID + ".1", "r1-n1": rack1ClusterUUID + ".1",
	}
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Errorf("clique ids (-want +got):\n%s", diff)
	}
	a, _ := Rack(0, "r0-n0").Discover(context.Background())
	b, _ := Rack(0, "r0-n1").Discover(context.Background())
	if a.GPUs[0].UUID == b.GPUs[0].UUID {
		t.Errorf("two nodes share nvml.GPU UUID %s", a.GPUs[0].UUID)
	}
}

func TestParseSim(t *testing.T) {
	cases := map[string]struct {
		spec    string
		want    Node
		wantErr string // substring; empty for success
	}{
		"rack node": {
			spec: `{"node":"n1","gpus":4,"fabric":{"clusterUUID":"` + rack0ClusterUUID + `","cliqueID":1,"state":"COMPLETED"}}`,
			want: Rack(0, "n1"),
		},
		"per-nvml.GPU override and failure status": {
			spec: `{"node":"n1","gpus":2,"fabric":{"noFabric":true},"perGPU":{"1":{"state":"completed","status":999}}}`,
			want: Node{Node: "n1", GPUs: 2, Fabric: Fabric{NoFabric: true},
				PerGPU: map[int]Fabric{1: {State: nvml.FabricStateCompleted, Status: 999}}},
		},
		"unknown field":         {spec: `{"node":"n1","gpu":4}`, wantErr: `unknown field "gpu"`},
		"trailing data":         {spec: `{"node":"n1"} {}`, wantErr: "unexpected data"},
		"bad cluster UUID":      {spec: `{"node":"n1","gpus":1,"fabric":{"clusterUUID":"nope","state":"COMPLETED"}}`, wantErr: `invalid UUID "nope"`},
		"unknown state":         {spec: `{"node":"n1","gpus":1,"fabric":{"state":"DONE"}}`, wantErr: `unknown fabric state "DONE"`},
		"cluster without state": {spec: `{"node":"n1","gpus":1,"fabric":{"clusterUUID":"` + rack0ClusterUUID + `"}}`, wantErr: "state must be set"},
		"noFabric with a state": {spec: `{"node":"n1","gpus":1,"fabric":{"noFabric":true,"state":"COMPLETED"}}`, wantErr: "noFabric leaves no room"},
		"perGPU out of range":   {spec: `{"node":"n1","gpus":1,"perGPU":{"1":{}}}`, wantErr: "perGPU names GPU 1, but the node has 1 GPUs"},
		"negative GPUs":         {spec: `{"node":"n1","gpus":-1}`, wantErr: "gpus -1: want 0 to 64"},
		"too many GPUs":         {spec: `{"node":"n1","gpus":65}`, wantErr: "gpus 65: want 0 to 64"},
		"driver version": {
			spec: `{"node":"n1","gpus":0,"driverVersion":"570.133.20"}`,
			want: Node{Node: "n1", DriverVersion: "570.133.20"},
		},
		"bad driver version": {spec: `{"node":"n1","driverVersion":"570"}`, wantErr: `driverVersion "570"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Parse([]byte(tc.spec))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse error = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("sim (-want +got):\n%s", diff)
			}
		})
	}
}

// A node reports DefaultDriverVersion unless its spec names another.
func TestNodeDriver(t *testing.T) {
	if got := Rack(0, "n1").Driver(); got != DefaultDriverVersion {
		t.Errorf("Rack(0).Driver() = %q, want %q", got, DefaultDriverVersion)
	}
	if got := (Node{DriverVersion: "565.57.01"}).Driver(); got != "565.57.01" {
		t.Errorf("Driver() = %q, want the spec's 565.57.01", got)
	}
}
