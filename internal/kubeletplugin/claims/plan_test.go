package claims

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin/checkpoint"
	"cdplane/internal/kubeletplugin/devices"
	"cdplane/internal/kubeletplugin/failure"
	"cdplane/internal/testutil"
)

// allocated starts an allocated claim; device adds one of this driver's devices from pool n1.
func allocated() *testutil.ResourceClaimWrapper {
	return testutil.MakeResourceClaim("claim", "ns").Allocated()
}

func device(w *testutil.ResourceClaimWrapper, request, dev string) *testutil.ResourceClaimWrapper {
	return w.Device(request, cdv1beta1.DriverName, "n1", dev)
}

func channelCfg(uid, mode string) string {
	return `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"` + uid + `","allocationMode":"` + mode + `"}`
}

func TestPlanClaim(t *testing.T) {
	daemonCfg := `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainDaemonConfig","domainID":"` + testUID + `"}`
	claimSrc, classSrc := resourcev1.AllocationConfigSourceClaim, resourcev1.AllocationConfigSourceClass
	cases := map[string]struct {
		claim   *resourcev1.ResourceClaim
		want    claimPlan
		wantErr string
	}{
		"channel": {
			claim: device(allocated(), "channel", "channel-0").
				AllocatedConfig(claimSrc, cdv1beta1.DriverName, channelCfg(testUID, "Single"), "channel").Obj(),
			want: claimPlan{Kind: devices.KindChannel, DomainID: testUID, AllocationMode: "Single",
				Devices: []allocatedDevice{{Request: "channel", Pool: "n1", Device: "channel-0", Kind: devices.KindChannel}}},
		},
		"claim config overrides class config": {
			claim: device(allocated(), "channel", "channel-3").
				AllocatedConfig(classSrc, cdv1beta1.DriverName, channelCfg("class-uid", "Single")).
				AllocatedConfig(claimSrc, cdv1beta1.DriverName, channelCfg(testUID, "All")).Obj(),
			want: claimPlan{Kind: devices.KindChannel, DomainID: testUID, AllocationMode: "All",
				Devices: []allocatedDevice{{Request: "channel", Pool: "n1", Device: "channel-3", Kind: devices.KindChannel, ID: 3}}},
		},
		"subrequest matches its request's config": {
			claim: device(allocated(), "channel/any", "channel-0").
				AllocatedConfig(claimSrc, cdv1beta1.DriverName, channelCfg(testUID, "Single"), "channel").Obj(),
			want: claimPlan{Kind: devices.KindChannel, DomainID: testUID, AllocationMode: "Single",
				Devices: []allocatedDevice{{Request: "channel/any", Pool: "n1", Device: "channel-0", Kind: devices.KindChannel}}},
		},
		"other drivers are ignored": {
			claim: device(allocated().Device("gpu", "gpu.nvidia.com", "n1", "gpu-0"), "daemon", "daemon-0").
				AllocatedConfig(claimSrc, "gpu.nvidia.com", `{"anything":1}`).
				AllocatedConfig(claimSrc, cdv1beta1.DriverName, daemonCfg, "daemon").Obj(),
			want: claimPlan{Kind: devices.KindDaemon, DomainID: testUID,
				Devices: []allocatedDevice{{Request: "daemon", Pool: "n1", Device: "daemon-0", Kind: devices.KindDaemon}}},
		},
		"bad config anywhere is refused": {
			claim: device(allocated(), "channel", "channel-0").
				AllocatedConfig(claimSrc, cdv1beta1.DriverName, channelCfg(testUID, "Single"), "channel").
				AllocatedConfig(claimSrc, cdv1beta1.DriverName, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"x","unexpectedField":1}`, "other").Obj(),
			wantErr: `status.allocation.devices.config[1].opaque.parameters: opaque config ComputeDomainChannelConfig: unknown field "unexpectedField"`,
		},
		"no config": {
			claim:   device(allocated(), "channel", "channel-0").Obj(),
			wantErr: `request "channel": no opaque config of driver compute-domain.nvidia.com applies`,
		},
		"config for another request": {
			claim: device(allocated(), "channel", "channel-0").
				AllocatedConfig(claimSrc, cdv1beta1.DriverName, channelCfg(testUID, "Single"), "other").Obj(),
			wantErr: "no opaque config",
		},
		"daemon config on a channel": {
			claim: device(allocated(), "channel", "channel-0").
				AllocatedConfig(claimSrc, cdv1beta1.DriverName, daemonCfg).Obj(),
			wantErr: "a channel device needs a ComputeDomainChannelConfig, got a ComputeDomainDaemonConfig",
		},
		"channel and daemon mixed": {
			claim: device(device(allocated(), "a", "channel-0"), "b", "daemon-0").
				AllocatedConfig(claimSrc, cdv1beta1.DriverName, channelCfg(testUID, "Single"), "a").
				AllocatedConfig(claimSrc, cdv1beta1.DriverName, daemonCfg, "b").Obj(),
			wantErr: "both channel and daemon devices",
		},
		"two domains": {
			claim: device(device(allocated(), "a", "channel-0"), "b", "channel-1").
				AllocatedConfig(claimSrc, cdv1beta1.DriverName, channelCfg(testUID, "Single"), "a").
				AllocatedConfig(claimSrc, cdv1beta1.DriverName, channelCfg("other-uid", "Single"), "b").Obj(),
			wantErr: "different ComputeDomains",
		},
		"unknown device": {
			claim: device(allocated(), "channel", "gpu-0").
				AllocatedConfig(claimSrc, cdv1beta1.DriverName, channelCfg(testUID, "Single")).Obj(),
			wantErr: `device "gpu-0" is not one this driver publishes`,
		},
		"nothing of this driver": {
			claim:   allocated().Obj(),
			wantErr: "no device of driver compute-domain.nvidia.com",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := planClaim(tc.claim)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !failure.IsPermanent(err) {
					t.Fatalf("error %v, want a permanent error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if _, err := planClaim(testutil.MakeResourceClaim("claim", "ns").Obj()); !failure.IsRetryable(err) {
		t.Errorf("unallocated claim: %v, want a retryable error", err)
	}
}

// TestPreparedElsewhere: a device the checkpoint holds as prepared for another claim is not
// prepared again, and the refusal names both claims and is retryable; the claim's own entry, and
// another claim only started (no devices yet) or holding other devices, do not count.
func TestPreparedElsewhere(t *testing.T) {
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "driver", Name: "new", UID: "uid-new"}}
	plan := claimPlan{Kind: devices.KindDaemon, Devices: []allocatedDevice{{Request: "daemon", Pool: "node-1", Device: "daemon-0", Kind: devices.KindDaemon}}}
	entry := func(state checkpoint.ClaimState, name string, devices ...string) checkpoint.ClaimEntry {
		e := checkpoint.ClaimEntry{State: state, Namespace: "driver", Name: name, Kind: "daemon"}
		for _, d := range devices {
			e.Devices = append(e.Devices, checkpoint.PreparedDevice{Requests: []string{"r"}, Pool: "node-1", Device: d})
		}
		return e
	}
	for name, tc := range map[string]struct {
		cp   map[types.UID]checkpoint.ClaimEntry
		want string // "" none
	}{
		"empty":                        {},
		"its own entry":                {cp: map[types.UID]checkpoint.ClaimEntry{"uid-new": entry(checkpoint.PrepareCompleted, "new", "daemon-0")}},
		"another claim, other devices": {cp: map[types.UID]checkpoint.ClaimEntry{"uid-old": entry(checkpoint.PrepareCompleted, "old", "channel-0")}},
		"another claim only started":   {cp: map[types.UID]checkpoint.ClaimEntry{"uid-old": entry(checkpoint.PrepareStarted, "old")}},
		"same device name, other pool": {cp: map[types.UID]checkpoint.ClaimEntry{"uid-old": {State: checkpoint.PrepareCompleted, Namespace: "driver", Name: "old",
			Devices: []checkpoint.PreparedDevice{{Pool: "node-2", Device: "daemon-0"}}}}},
		"another claim holds it": {cp: map[types.UID]checkpoint.ClaimEntry{"uid-old": entry(checkpoint.PrepareCompleted, "old", "daemon-0")},
			want: "not preparing claim driver/new (uid-new): device node-1/daemon-0 is prepared for claim driver/old (uid-old)"},
	} {
		t.Run(name, func(t *testing.T) {
			err := preparedElsewhere(tc.cp, claim, plan)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !failure.IsRetryable(err)):
				t.Fatalf("err = %v, want a retryable refusal containing %q", err, tc.want)
			}
		})
	}
}
