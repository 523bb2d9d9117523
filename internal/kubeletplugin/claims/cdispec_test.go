package claims

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"cdplane/internal/daemonenv"
	"cdplane/internal/kubeletplugin/cdi"
	"cdplane/internal/kubeletplugin/devices"
)

func TestChannelSpec(t *testing.T) {
	uid := types.UID("u1")
	plan := func(mode string, ids ...int) claimPlan {
		p := claimPlan{Kind: devices.KindChannel, AllocationMode: mode}
		for _, id := range ids {
			p.Devices = append(p.Devices, allocatedDevice{Request: "r", Device: devices.ChannelDeviceName(id), ID: id})
		}
		return p
	}
	node := func(id int) *cdispec.DeviceNode {
		return &cdispec.DeviceNode{Path: fmt.Sprintf("/dev/nvidia-caps-imex-channels/channel%d", id)}
	}
	nodesOf := func(ids []int) []*cdispec.DeviceNode {
		out := make([]*cdispec.DeviceNode, len(ids))
		for i, id := range ids {
			out[i] = node(id)
		}
		return out
	}
	cases := map[string]struct {
		plan      claimPlan
		wantIDs   int
		wantNodes map[string]int
	}{
		"single":          {plan: plan("Single", 0), wantIDs: 1, wantNodes: map[string]int{"u1-channel-0": 1}},
		"single, two":     {plan: plan("Single", 0, 7), wantIDs: 2, wantNodes: map[string]int{"u1-channel-0": 1, "u1-channel-7": 1}},
		"all":             {plan: plan("All", 0), wantIDs: devices.MaxChannels, wantNodes: map[string]int{"u1-channel-0": devices.MaxChannels}},
		"all, two claims": {plan: plan("All", 0, 1), wantIDs: devices.MaxChannels, wantNodes: map[string]int{"u1-channel-0": devices.MaxChannels}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ids := channelIDs(tc.plan)
			if len(ids) != tc.wantIDs {
				t.Fatalf("%d channel ids, want %d", len(ids), tc.wantIDs)
			}
			spec := channelSpec(uid, tc.plan, nodesOf(ids))
			got := map[string]int{}
			for _, d := range spec.Devices {
				got[d.Name] = len(d.ContainerEdits.DeviceNodes)
			}
			if diff := cmp.Diff(tc.wantNodes, got); diff != "" {
				t.Errorf("CDI devices (-want +got):\n%s", diff)
			}
			for dev := range channelCDIDevices(tc.plan) {
				if _, ok := got[string(uid)+"-"+dev]; !ok {
					t.Errorf("device %s is said to have a CDI device, but the spec has none", dev)
				}
			}
		})
	}
	if id := cdi.DeviceID(uid, "channel-0"); id != "k8s.compute-domain.nvidia.com/claim=u1-channel-0" {
		t.Errorf("CDI device id %s", id)
	}
}

func TestDaemonSpec(t *testing.T) {
	mgmt := &cdispec.DeviceNode{Path: "/dev/nvidia-caps/nvidia-cap1"}
	for name, tc := range map[string]struct {
		clique    string
		wantNodes int
	}{"clique": {"c.1", 1}, "no fabric": {"", 0}} {
		env := daemonenv.Claim{CliqueID: tc.clique, DomainUID: "d", DomainName: "n", DomainNamespace: "ns", IMEXConfigDir: "/etc/nvidia-imex"}
		spec := daemonSpec("u1", devices.DaemonDeviceName, env, "/state/d", nil, nil, mgmt)
		edits := spec.Devices[0].ContainerEdits
		want := []string{"CLIQUE_ID=" + tc.clique, "COMPUTE_DOMAIN_UUID=d", "COMPUTE_DOMAIN_NAME=n", "COMPUTE_DOMAIN_NAMESPACE=ns", "IMEX_CONFIG_DIR=/etc/nvidia-imex"}
		if diff := cmp.Diff(want, edits.Env); diff != "" {
			t.Errorf("%s: env (-want +got):\n%s", name, diff)
		}
		if len(edits.DeviceNodes) != tc.wantNodes {
			t.Errorf("%s: %d device nodes, want %d", name, len(edits.DeviceNodes), tc.wantNodes)
		}
		if edits.Mounts[0].HostPath != "/state/d" || edits.Mounts[0].ContainerPath != "/etc/nvidia-imex" {
			t.Errorf("%s: mount %+v", name, edits.Mounts[0])
		}
	}
}
