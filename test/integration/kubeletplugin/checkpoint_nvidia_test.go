package kubeletplugin

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/dump"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin"
)

// TestTakeOverNVIDIACheckpoint: the plugin starts on the checkpoint NVIDIA's compute-domain
// kubelet plugin left (its v2 layout, with the node's boot id), keeps a copy of it, and serves
// the claims it lists. A claim NVIDIA's plugin had begun whose ResourceClaim is gone is undone at
// start; one whose ResourceClaim exists is prepared again, replacing NVIDIA's CDI spec; completed
// claims are given back as NVIDIA's plugin prepared them and unprepared with NVIDIA's CDI spec
// files; the node label goes with the domain's last channel claim.
func TestTakeOverNVIDIACheckpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.addNode(13)
	cd := e.createCD(e.ns, "nvidia")
	e.setClique(cd, n, cdv1beta1.StatusReady)
	done := e.channelClaim(e.ns, "done", n, cd, "")
	started := e.allocatedClaim(e.ns, "started", n, kubeletplugin.ChannelDeviceName(1),
		rawJSON(t, cdv1beta1.NewChannelConfig(string(cd.UID), "")), nil)
	gone := types.UID("5e0c9a1b-7d2f-4c3e-8a4b-6f1d2e3c4b01")
	daemon := types.UID("5e0c9a1b-7d2f-4c3e-8a4b-6f1d2e3c4b02")

	// What NVIDIA's plugin left on the node: its checkpoint, a CDI spec per claim, the node label
	// and the domain's config directory.
	goneStatus := channelStatus(n, cd, kubeletplugin.ChannelDeviceName(2))
	daemonStatus := daemonStatus(n, cd)
	claims := map[string]nvidiaClaimV2{
		string(done.UID): {CheckpointState: "PrepareCompleted", Status: done.Status, Name: done.Name, Namespace: done.Namespace,
			PreparedDevices: []nvidiaGroup{nvidiaChannelGroup(n, cd, done.UID, 0)}},
		string(started.UID): {CheckpointState: "PrepareStarted", Status: started.Status, Name: started.Name, Namespace: started.Namespace},
		string(gone):        {CheckpointState: "PrepareStarted", Status: goneStatus, Name: "gone", Namespace: e.ns},
		string(daemon): {CheckpointState: "PrepareCompleted", Status: daemonStatus, Name: "daemon", Namespace: e.driverNS,
			PreparedDevices: []nvidiaGroup{nvidiaDaemonGroup(n, cd, daemon)}},
	}
	original := nvidiaCheckpointV2(t, claims, bootID(t))
	if err := os.MkdirAll(n.path("state", "domains", string(cd.UID)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.path("state", kubeletplugin.CheckpointFile), original, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []types.UID{done.UID, started.UID, gone, daemon} {
		writeNVIDIASpec(t, n, uid)
	}
	n.setLabel(string(cd.UID))

	n.start(4)

	kept, err := os.ReadFile(n.path("state", kubeletplugin.CheckpointFile+".nvidia-v2.bak"))
	if err != nil || string(kept) != string(original) {
		t.Fatalf("NVIDIA's checkpoint is not kept as it was: %v", err)
	}
	cp := n.checkpoint()
	for uid, want := range map[types.UID]kubeletplugin.ClaimState{
		done.UID: kubeletplugin.PrepareCompleted, started.UID: kubeletplugin.PrepareStarted,
		gone: kubeletplugin.PrepareAborted, daemon: kubeletplugin.PrepareCompleted,
	} {
		if got := cp.Claims[uid]; got.State != want {
			t.Errorf("claim %s taken over as %+v, want state %s", uid, got, want)
		}
	}
	if len(cp.Claims) != 4 {
		t.Errorf("checkpoint lists %d claims, want 4", len(cp.Claims))
	}
	if nvidiaSpecExists(t, n, gone) {
		t.Error("the spec of the claim whose ResourceClaim is gone was left at start")
	}
	if l := n.label(); l != string(cd.UID) {
		t.Errorf("node label %q after start, want %s: other claims of the domain are prepared", l, cd.UID)
	}

	// Prepared again: the claim NVIDIA's plugin had begun gets this plugin's spec instead of NVIDIA's.
	got := n.mustPrepare(started)
	if nvidiaSpecExists(t, n, started.UID) {
		t.Error("NVIDIA's spec of a claim prepared again is left beside this plugin's")
	}
	if _, ok := n.cdiSpec(started.UID); !ok || len(got.Devices) != 1 || got.Devices[0].DeviceName != "channel-1" {
		t.Errorf("prepare of the begun claim answered %v, spec written %v", got.Devices, ok)
	}
	// A completed claim is given back as NVIDIA's plugin prepared it.
	got = n.mustPrepare(done)
	wantID := "k8s.compute-domain.nvidia.com/claim=" + string(done.UID) + "-channel-0"
	if len(got.Devices) != 1 || len(got.Devices[0].CdiDeviceIds) != 1 || got.Devices[0].CdiDeviceIds[0] != wantID {
		t.Errorf("prepare of a completed claim answered %v, want its device with CDI id %s", got.Devices, wantID)
	}

	for _, c := range []struct {
		ns, name  string
		uid       types.UID
		wantLabel string
	}{
		{e.driverNS, "daemon", daemon, string(cd.UID)},
		{done.Namespace, done.Name, done.UID, string(cd.UID)},
		{e.ns, "gone", gone, string(cd.UID)},
		{started.Namespace, started.Name, started.UID, ""},
	} {
		if msg := n.unprepare(c.ns, c.name, c.uid); msg != "" {
			t.Fatalf("unprepare %s: %s", c.name, msg)
		}
		if nvidiaSpecExists(t, n, c.uid) {
			t.Errorf("NVIDIA's spec of %s left after its unprepare", c.name)
		}
		if _, ok := n.cdiSpec(c.uid); ok {
			t.Errorf("this plugin's spec of %s left after its unprepare", c.name)
		}
		if _, ok := n.checkpoint().Claims[c.uid]; ok {
			t.Errorf("%s still in the checkpoint after its unprepare", c.name)
		}
		if l := n.label(); l != c.wantLabel {
			t.Errorf("node label %q after unpreparing %s, want %q", l, c.name, c.wantLabel)
		}
	}
	if _, err := os.Stat(n.path("state", kubeletplugin.CheckpointFile+".nvidia-v2.bak")); err != nil {
		t.Errorf("the copy of NVIDIA's checkpoint is gone: %v", err)
	}
}

// NVIDIA's v2 layout, as its plugin marshals it: a top-level checksum over a v1 copy of the
// completed claims, and v2 with its own checksum.
type nvidiaCheckpoint struct {
	Checksum uint64        `json:"checksum"`
	V1       *nvidiaV1     `json:"v1,omitempty"`
	V2       *nvidiaV2Part `json:"v2,omitempty"`
}

type nvidiaV1 struct {
	PreparedClaims map[string]nvidiaClaimV1 `json:"preparedClaims,omitempty"`
}

type nvidiaClaimV1 struct {
	Status          resourcev1.ResourceClaimStatus `json:"status,omitempty"`
	PreparedDevices []nvidiaGroup                  `json:"preparedDevices,omitempty"`
}

type nvidiaV2Part struct {
	Checksum       uint64                   `json:"checksum"`
	PreparedClaims map[string]nvidiaClaimV2 `json:"preparedClaims,omitempty"`
	NodeBootID     string                   `json:"nodeBootID,omitempty"`
}

type nvidiaClaimV2 struct {
	CheckpointState string                         `json:"checkpointState"`
	Status          resourcev1.ResourceClaimStatus `json:"status,omitempty"`
	PreparedDevices []nvidiaGroup                  `json:"preparedDevices,omitempty"`
	Name            string                         `json:"name,omitempty"`
	Namespace       string                         `json:"namespace,omitempty"`
}

type nvidiaGroup struct {
	Devices     []nvidiaDevice `json:"devices"`
	ConfigState struct {
		Type          string
		ComputeDomain string
	} `json:"configState"`
}

type nvidiaDevice struct {
	Channel *nvidiaOfKind `json:"channel"`
	Daemon  *nvidiaOfKind `json:"daemon"`
}

type nvidiaOfKind struct {
	Info struct {
		ID int `json:"id"`
	} `json:"info"`
	Device struct {
		Requests     []string
		PoolName     string
		DeviceName   string
		CDIDeviceIDs []string
	} `json:"device"`
}

func nvidiaChannelGroup(n *node, cd *cdv1beta1.ComputeDomain, uid types.UID, id int) nvidiaGroup {
	var g nvidiaGroup
	g.ConfigState.Type, g.ConfigState.ComputeDomain = "channel", string(cd.UID)
	d := &nvidiaOfKind{}
	d.Info.ID = id
	d.Device.Requests, d.Device.PoolName, d.Device.DeviceName = []string{"channel"}, n.name, kubeletplugin.ChannelDeviceName(id)
	d.Device.CDIDeviceIDs = []string{fmt.Sprintf("k8s.compute-domain.nvidia.com/claim=%s-channel-%d", uid, id)}
	g.Devices = []nvidiaDevice{{Channel: d}}
	return g
}

func nvidiaDaemonGroup(n *node, cd *cdv1beta1.ComputeDomain, uid types.UID) nvidiaGroup {
	var g nvidiaGroup
	g.ConfigState.Type, g.ConfigState.ComputeDomain = "daemon", string(cd.UID)
	d := &nvidiaOfKind{}
	d.Device.Requests, d.Device.PoolName, d.Device.DeviceName = []string{"daemon"}, n.name, kubeletplugin.DaemonDeviceName
	d.Device.CDIDeviceIDs = []string{"k8s.compute-domain.nvidia.com/device=all", "k8s.compute-domain.nvidia.com/claim=" + string(uid) + "-daemon-0"}
	g.Devices = []nvidiaDevice{{Daemon: d}}
	return g
}

func allocation(n *node, request, device string, params any) resourcev1.ResourceClaimStatus {
	raw, err := json.Marshal(params)
	if err != nil {
		panic(err)
	}
	return resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
		Results: []resourcev1.DeviceRequestAllocationResult{{Request: request, Driver: cdv1beta1.DriverName, Pool: n.name, Device: device}},
		Config: []resourcev1.DeviceAllocationConfiguration{{Source: resourcev1.AllocationConfigSourceClaim, Requests: []string{request},
			DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
				Driver: cdv1beta1.DriverName, Parameters: runtime.RawExtension{Raw: raw}}}}},
	}}}
}

func channelStatus(n *node, cd *cdv1beta1.ComputeDomain, device string) resourcev1.ResourceClaimStatus {
	return allocation(n, "channel", device, cdv1beta1.NewChannelConfig(string(cd.UID), ""))
}

func daemonStatus(n *node, cd *cdv1beta1.ComputeDomain) resourcev1.ResourceClaimStatus {
	return allocation(n, "daemon", kubeletplugin.DaemonDeviceName, cdv1beta1.NewDaemonConfig(string(cd.UID)))
}

// nvidiaCheckpointV2 marshals claims as NVIDIA's plugin does, with its checksums: FNV-32a of the
// k8s.io/utils/dump.ForHash rendering of the JSON with the checksum at 0; the top-level one over
// the v1 copy alone, v2's over v2.
func nvidiaCheckpointV2(t *testing.T, claims map[string]nvidiaClaimV2, bootID string) []byte {
	t.Helper()
	v1 := &nvidiaV1{PreparedClaims: map[string]nvidiaClaimV1{}}
	for uid, c := range claims {
		if c.CheckpointState == "PrepareCompleted" {
			v1.PreparedClaims[uid] = nvidiaClaimV1{Status: c.Status, PreparedDevices: c.PreparedDevices}
		}
	}
	cp := nvidiaCheckpoint{V1: v1}
	cp.Checksum = nvidiaSum(t, cp)
	cp.V2 = &nvidiaV2Part{PreparedClaims: claims, NodeBootID: bootID}
	cp.V2.Checksum = nvidiaSum(t, *cp.V2)
	data, err := json.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func nvidiaSum(t *testing.T, v any) uint64 {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	h := fnv.New32a()
	fmt.Fprintf(h, "%v", dump.ForHash(data))
	return uint64(h.Sum32())
}

// bootID is the node's boot id, as NVIDIA's plugin records it ("" where there is none).
func bootID(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// nvidiaSpecPath is where NVIDIA's plugin writes a claim's CDI spec: YAML, named by CDI vendor,
// class and claim UID.
func nvidiaSpecPath(n *node, uid types.UID) string {
	return n.path("cdi", "k8s.compute-domain.nvidia.com-claim_"+string(uid)+".yaml")
}

func writeNVIDIASpec(t *testing.T, n *node, uid types.UID) {
	t.Helper()
	spec := "cdiVersion: 0.5.0\nkind: k8s.compute-domain.nvidia.com/claim\ndevices:\n- name: " + string(uid) + "-channel-0\n" +
		"  containerEdits:\n    env:\n    - WRITTEN_BY=nvidia\n"
	if err := os.MkdirAll(filepath.Dir(nvidiaSpecPath(n, uid)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(nvidiaSpecPath(n, uid), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
}

func nvidiaSpecExists(t *testing.T, n *node, uid types.UID) bool {
	t.Helper()
	_, err := os.Stat(nvidiaSpecPath(n, uid))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return err == nil
}
