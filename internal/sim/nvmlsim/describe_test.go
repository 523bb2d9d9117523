package nvmlsim

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cdplane/internal/nvml"
)

// Describe shows simulated readings as it shows real ones.
func TestDescribe(t *testing.T) {
	rack := Rack(0, "node-a")
	rack.GPUs = 2
	failed := rack
	failed.PerGPU = map[int]Fabric{1: {State: nvml.FabricStateCompleted, Status: 999}}
	fabricless := Node{Node: "node-b", GPUs: 1, Fabric: Fabric{NoFabric: true}}

	cases := map[string]struct {
		sim  Node
		want string
	}{
		"rack node": {
			sim: rack,
			want: "Backend: sim\n" +
				"GPUs: 2\n" +
				"  GPU 0  " + nodeAGPU0UUID + "  fabric: state COMPLETED, status SUCCESS, clusterUUID " + rack0ClusterUUID + ", cliqueId 1\n" +
				"  GPU 1  " + nodeAGPU1UUID + "  fabric: state COMPLETED, status SUCCESS, clusterUUID " + rack0ClusterUUID + ", cliqueId 1\n" +
				"Clique: " + rack0ClusterUUID + ".1\n",
		},
		"failed GPU": {
			sim: failed,
			want: "Backend: sim\n" +
				"GPUs: 2\n" +
				"  GPU 0  " + nodeAGPU0UUID + "  fabric: state COMPLETED, status SUCCESS, clusterUUID " + rack0ClusterUUID + ", cliqueId 1\n" +
				"  GPU 1  " + nodeAGPU1UUID + "  fabric: state COMPLETED, status ERROR_UNKNOWN, clusterUUID 00000000-0000-0000-0000-000000000000, cliqueId 0\n" +
				"Clique: not known: GPU 1 (" + nodeAGPU1UUID + "): NVLink fabric registration failed: state COMPLETED, status ERROR_UNKNOWN\n",
		},
		"fabric-less node": {
			sim: fabricless,
			want: "Backend: sim\n" +
				"GPUs: 1\n" +
				"  GPU 0  " + GPUUUID("node-b", 0) + "  fabric: not supported\n" +
				"Clique: none (no NVLink fabric)\n",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			res, err := tc.sim.Discover(context.Background())
			if diff := cmp.Diff(tc.want, nvml.Describe(res, err)); diff != "" {
				t.Errorf("Describe (-want +got):\n%s", diff)
			}
		})
	}
}
