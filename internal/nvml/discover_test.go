package nvml

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNew(t *testing.T) {
	rack := RackSim(0, "node-a")
	cases := map[string]struct {
		backend string
		opts    Options
		wantErr string // substring; empty for success
	}{
		"sim with a spec":     {backend: BackendSim, opts: Options{Sim: &rack}},
		"sim without a spec":  {backend: BackendSim, wantErr: `nvml backend "sim" needs a sim spec`},
		"sim with a bad spec": {backend: BackendSim, opts: Options{Sim: &Sim{GPUs: 1}}, wantErr: "node must be set"},
		"nvml with a spec":    {backend: BackendNVML, opts: Options{Sim: &rack}, wantErr: "a sim spec was given"},
		"auto with a spec":    {backend: BackendAuto, opts: Options{Sim: &rack}, wantErr: "a sim spec was given"},
		"unknown backend":     {backend: "fake", wantErr: `unknown nvml backend "fake" (want "nvml", "sim" or "auto")`},
		"empty backend":       {backend: "", wantErr: `unknown nvml backend ""`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d, err := New(tc.backend, tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("New error = %v, want it to contain %q", err, tc.wantErr)
				}
				if errors.Is(err, ErrNVMLUnavailable) {
					t.Errorf("a configuration error matches ErrNVMLUnavailable: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			res, err := d.Discover(context.Background())
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if diff := cmp.Diff(RackCliqueID(0), res.CliqueID); diff != "" {
				t.Errorf("clique id (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	rack := RackSim(0, "node-a")
	rack.GPUs = 2
	failed := rack
	failed.PerGPU = map[int]SimFabric{1: {State: FabricStateCompleted, Status: 999}}
	fabricless := Sim{Node: "node-b", GPUs: 1, Fabric: SimFabric{NoFabric: true}}

	cases := map[string]struct {
		sim  Sim
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
				"  GPU 0  " + SimGPUUUID("node-b", 0) + "  fabric: not supported\n" +
				"Clique: none (no NVLink fabric)\n",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			res, err := tc.sim.Discover(context.Background())
			if diff := cmp.Diff(tc.want, Describe(res, err)); diff != "" {
				t.Errorf("Describe (-want +got):\n%s", diff)
			}
		})
	}
}
