package kubeletplugin

import (
	"cdplane/internal/daemonenv"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/nvml"
	"cdplane/internal/testutil"
)

func TestDaemonReady(t *testing.T) {
	clique := func(status string) *cdv1beta1.ComputeDomainClique {
		return testutil.MakeClique("uid.c", "ns").Daemon("n1", "10.0.0.1", "c", 0, status).Daemon("n2", "10.0.0.2", "c", 1, cdv1beta1.StatusReady).Obj()
	}
	cd := func(status string) *cdv1beta1.ComputeDomain {
		c := testutil.MakeComputeDomain("cd").Obj()
		c.Status.Nodes = []cdv1beta1.ComputeDomainNode{{Name: "n1", CliqueID: "c", Status: status}}
		return c
	}
	cases := map[string]struct {
		clique     *cdv1beta1.ComputeDomainClique
		cd         *cdv1beta1.ComputeDomain
		want       bool
		wantReason string
	}{
		"ready in clique":                 {clique: clique(cdv1beta1.StatusReady), cd: cd(""), want: true},
		"ready in status only":            {clique: nil, cd: cd(cdv1beta1.StatusReady), want: true},
		"ready in status, clique lagging": {clique: clique(cdv1beta1.StatusNotReady), cd: cd(cdv1beta1.StatusReady), want: true},
		"not ready in clique": {clique: clique(cdv1beta1.StatusNotReady), cd: testutil.MakeComputeDomain("cd").Obj(),
			wantReason: "clique uid.c lists the node as NotReady; ComputeDomain status does not list the node yet"},
		"missing from clique": {clique: testutil.MakeClique("uid.c", "ns").Obj(), cd: nil,
			wantReason: "clique uid.c does not list the node yet"},
		"not ready in status": {cd: cd(cdv1beta1.StatusNotReady), wantReason: "ComputeDomain status lists the node as NotReady"},
		"no status":           {cd: cd(""), wantReason: "lists the node as without status"},
		"nothing":             {wantReason: "ComputeDomain status does not list the node yet"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, reason := DaemonReady("n1", tc.clique, tc.cd)
			if got != tc.want || !strings.Contains(reason, tc.wantReason) {
				t.Errorf("DaemonReady = %v %q, want %v containing %q", got, reason, tc.want, tc.wantReason)
			}
		})
	}
}

func TestAddLabelDecision(t *testing.T) {
	cases := map[string]struct {
		current string
		add     bool
		err     string
	}{
		"unlabelled":   {current: "", add: true},
		"already ours": {current: "cd-a"},
		"another":      {current: "cd-b", err: "node n1 already serves ComputeDomain cd-b"},
	}
	for name, tc := range cases {
		add, err := addLabelDecision("n1", tc.current, "cd-a")
		if add != tc.add || (tc.err == "") != (err == nil) || (err != nil && (!strings.Contains(err.Error(), tc.err) || !IsRetryable(err))) {
			t.Errorf("%s: add=%v err=%v, want add=%v err containing %q (retryable)", name, add, err, tc.add, tc.err)
		}
	}
}

func TestRemoveLabelDecision(t *testing.T) {
	entry := func(kind DeviceKind, domain string, state ClaimState) ClaimEntry {
		return ClaimEntry{Kind: string(kind), DomainID: domain, State: state}
	}
	self := types.UID("self")
	cases := map[string]struct {
		current string
		others  map[types.UID]ClaimEntry
		want    bool
	}{
		"ours, last claim":        {current: "cd-a", want: true},
		"not ours":                {current: "cd-b"},
		"unlabelled":              {current: ""},
		"another claim completed": {current: "cd-a", others: map[types.UID]ClaimEntry{"o": entry(KindChannel, "cd-a", PrepareCompleted)}},
		"another claim started":   {current: "cd-a", others: map[types.UID]ClaimEntry{"o": entry(KindChannel, "cd-a", PrepareStarted)}},
		"another claim aborted":   {current: "cd-a", others: map[types.UID]ClaimEntry{"o": entry(KindChannel, "cd-a", PrepareAborted)}, want: true},
		"other domain's claim":    {current: "cd-a", others: map[types.UID]ClaimEntry{"o": entry(KindChannel, "cd-b", PrepareCompleted)}, want: true},
		"daemon claim of domain":  {current: "cd-a", others: map[types.UID]ClaimEntry{"o": entry(KindDaemon, "cd-a", PrepareCompleted)}, want: true},
	}
	for name, tc := range cases {
		claims := map[types.UID]ClaimEntry{self: entry(KindChannel, "cd-a", PrepareCompleted)}
		for k, v := range tc.others {
			claims[k] = v
		}
		if got := removeLabelDecision(tc.current, "cd-a", self, claims); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

func TestCheckNamespaces(t *testing.T) {
	if err := checkDomainNamespace("ns", "c", "ns", "cd"); err != nil {
		t.Errorf("same namespace: %v", err)
	}
	if err := checkDomainNamespace("ns", "c", "other", "cd"); !IsPermanent(err) {
		t.Errorf("other namespace: %v, want a permanent error", err)
	}
	if err := checkDaemonNamespace("driver", "c", "driver"); err != nil {
		t.Errorf("driver namespace: %v", err)
	}
	if err := checkDaemonNamespace("ns", "c", "driver"); !IsPermanent(err) {
		t.Errorf("daemon claim elsewhere: %v, want a permanent error", err)
	}
}

func TestParseProcDevices(t *testing.T) {
	data := []byte("Character devices:\n  1 mem\n195 nvidia\n234 nvidia-caps-imex-channels\n235 nvidia-caps\n\nBlock devices:\n  8 sd\n236 nvidia-caps-imex-channels-block\n")
	cases := map[string]struct {
		name  string
		major int64
		ok    bool
	}{
		"channels":         {"nvidia-caps-imex-channels", 234, true},
		"caps":             {"nvidia-caps", 235, true},
		"block is ignored": {"sd", 0, false},
		"absent":           {"nvidia-uvm", 0, false},
	}
	for name, tc := range cases {
		major, ok := ParseProcDevices(data, tc.name)
		if major != tc.major || ok != tc.ok {
			t.Errorf("%s: %d %v, want %d %v", name, major, ok, tc.major, tc.ok)
		}
	}
}

func TestParseCapabilityMinor(t *testing.T) {
	cases := map[string]struct {
		data  string
		minor int64
		err   bool
	}{
		"driver format": {data: "DeviceFileMinor: 7\nDeviceFileMode: 256\nDeviceFileModify: 1\n", minor: 7},
		"missing":       {data: "DeviceFileMode: 256\n", err: true},
		"garbage":       {data: "DeviceFileMinor: x\n", err: true},
	}
	for name, tc := range cases {
		minor, err := ParseCapabilityMinor([]byte(tc.data))
		if minor != tc.minor || (err != nil) != tc.err {
			t.Errorf("%s: %d %v, want %d err=%v", name, minor, err, tc.minor, tc.err)
		}
	}
}

func TestDeviceNodes(t *testing.T) {
	root := t.TempDir()
	proc := filepath.Join(root, "devices")
	capFile := filepath.Join(root, "fabric-imex-mgmt")
	if err := os.WriteFile(proc, []byte("Character devices:\n234 nvidia-caps-imex-channels\n235 nvidia-caps\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(capFile, []byte("DeviceFileMinor: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var made []string
	real := deviceNodes{root: filepath.Join(root, "dev"), procDevices: proc, mgmtCapFile: capFile, readFile: os.ReadFile,
		makeCharDevice: func(path string, major, minor uint32) error {
			made = append(made, fmt.Sprintf("%s %d:%d", filepath.Base(path), major, minor))
			return nil
		}}
	nodes, err := real.channels([]int{0, 5})
	if err != nil {
		t.Fatal(err)
	}
	want := []*cdispec.DeviceNode{
		{Path: "/dev/nvidia-caps-imex-channels/channel0", HostPath: filepath.Join(root, "dev/nvidia-caps-imex-channels/channel0"), Type: "c", Major: 234, Minor: 0},
		{Path: "/dev/nvidia-caps-imex-channels/channel5", HostPath: filepath.Join(root, "dev/nvidia-caps-imex-channels/channel5"), Type: "c", Major: 234, Minor: 5},
	}
	if diff := cmp.Diff(want, nodes); diff != "" {
		t.Errorf("channels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"channel0 234:0", "channel5 234:5"}, made); diff != "" {
		t.Errorf("mknod calls (-want +got):\n%s", diff)
	}
	mgmt, err := real.imexMgmt()
	if err != nil {
		t.Fatal(err)
	}
	if mgmt.Path != "/dev/nvidia-caps/nvidia-cap3" || mgmt.Major != 235 || mgmt.Minor != 3 || mgmt.Type != "c" {
		t.Errorf("IMEX management device %+v", mgmt)
	}

	onDev := deviceNodes{root: "/dev", procDevices: proc, readFile: os.ReadFile}
	if got := onDev.hostPath("/dev/nvidia-caps-imex-channels/channel0"); got != "" {
		t.Errorf("with root /dev the host path is %q, want none (same as the container path)", got)
	}

	noDriver := real
	noDriver.procDevices = capFile
	if _, err := noDriver.channels([]int{0}); err == nil || !strings.Contains(err.Error(), "is the NVIDIA driver loaded") {
		t.Errorf("without the driver: %v", err)
	}

	// A node that exists already is used as it is.
	existing := filepath.Join(root, "dev/nvidia-caps-imex-channels/channel7")
	if err := os.WriteFile(existing, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	made = nil
	if _, err := real.channels([]int{7}); err != nil {
		t.Fatal(err)
	}
	if len(made) != 0 {
		t.Errorf("an existing device node was made again: %v", made)
	}
}

func TestChannelSpec(t *testing.T) {
	uid := types.UID("u1")
	plan := func(mode string, ids ...int) claimPlan {
		p := claimPlan{Kind: KindChannel, AllocationMode: mode}
		for _, id := range ids {
			p.Devices = append(p.Devices, allocatedDevice{Request: "r", Device: ChannelDeviceName(id), ID: id})
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
		"all":             {plan: plan("All", 0), wantIDs: MaxChannels, wantNodes: map[string]int{"u1-channel-0": MaxChannels}},
		"all, two claims": {plan: plan("All", 0, 1), wantIDs: MaxChannels, wantNodes: map[string]int{"u1-channel-0": MaxChannels}},
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
	if id := CDIDeviceID(uid, "channel-0"); id != "k8s.compute-domain.nvidia.com/claim=u1-channel-0" {
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
		spec := daemonSpec("u1", DaemonDeviceName, env, "/state/d", mgmt)
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

func TestIMEXConfigTemplate(t *testing.T) {
	tmpl, err := IMEXConfigTemplate()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"BIND_INTERFACE_IP={{POD_IP}}", "IMEX_CMD_BIND_INTERFACE_IP={{POD_IP}}", "IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes.cfg", "SERVER_PORT=50000"} {
		if !strings.Contains(string(tmpl), line+"\n") {
			t.Errorf("template lacks %q:\n%s", line, tmpl)
		}
	}
}

// fakeDiscoverer answers from a list of results, one per call, repeating the last.
type fakeDiscoverer struct {
	results []nvml.Result
	errs    []error
	calls   int
}

func (f *fakeDiscoverer) Discover(context.Context) (nvml.Result, error) {
	i := min(f.calls, len(f.results)-1)
	f.calls++
	return f.results[i], f.errs[i]
}

func TestCliqueTracker(t *testing.T) {
	notReady := &nvml.NotReadyError{State: nvml.FabricStateInProgress}
	failed := &nvml.FabricError{State: nvml.FabricStateCompleted, Status: 3}
	type step struct {
		id      string
		err     error
		changed bool
		fatal   bool
		current string
		curErr  bool
	}
	cases := map[string]struct {
		crash bool
		steps []step
	}{
		"not ready, then known, then unchanged": {steps: []step{
			{err: notReady, curErr: true},
			{id: "c.1", changed: true, current: "c.1"},
			{id: "c.1", current: "c.1"},
		}},
		"no fabric is known": {steps: []step{{id: "", changed: true, current: ""}}},
		"fabric failure kept when not crashing": {steps: []step{
			{id: "c.1", changed: true, current: "c.1"},
			{err: failed, curErr: true},
		}},
		"fabric failure is fatal when crashing": {crash: true, steps: []step{{err: failed, fatal: true, curErr: true}}},
		"not ready is never fatal":              {crash: true, steps: []step{{err: notReady, curErr: true}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeDiscoverer{}
			for _, s := range tc.steps {
				f.results = append(f.results, nvml.Result{CliqueID: s.id})
				f.errs = append(f.errs, s.err)
			}
			tr := &cliqueTracker{disc: f, crash: tc.crash}
			for i, s := range tc.steps {
				changed, fatal := tr.refresh(context.Background())
				if changed != s.changed || (fatal != nil) != s.fatal {
					t.Errorf("step %d: changed=%v fatal=%v, want %v %v", i, changed, fatal, s.changed, s.fatal)
				}
				cur, err := tr.current()
				if cur != s.current || (err != nil) != s.curErr || (err != nil && !IsRetryable(err)) {
					t.Errorf("step %d: current %q %v, want %q err=%v (retryable)", i, cur, err, s.current, s.curErr)
				}
			}
		})
	}
	if !errors.Is(failed, nvml.ErrFabricFailed) {
		t.Fatal("test premise: a FabricError is a fabric failure")
	}
}
