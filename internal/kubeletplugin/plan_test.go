package kubeletplugin

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	cdv1beta1 "cdplane/api/v1beta1"
)

// allocation builds an allocated claim of this driver's devices with the given configs.
func allocation(results []resourcev1.DeviceRequestAllocationResult, configs ...resourcev1.DeviceAllocationConfiguration) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{
		Devices: resourcev1.DeviceAllocationResult{Results: results, Config: configs},
	}}}
}

func result(request, device string) resourcev1.DeviceRequestAllocationResult {
	return resourcev1.DeviceRequestAllocationResult{Request: request, Driver: cdv1beta1.DriverName, Pool: "n1", Device: device}
}

func opaque(driver, raw string, source resourcev1.AllocationConfigSource, requests ...string) resourcev1.DeviceAllocationConfiguration {
	return resourcev1.DeviceAllocationConfiguration{Source: source, Requests: requests, DeviceConfiguration: resourcev1.DeviceConfiguration{
		Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(raw)}},
	}}
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
			claim: allocation([]resourcev1.DeviceRequestAllocationResult{result("channel", "channel-0")},
				opaque(cdv1beta1.DriverName, channelCfg(testUID, "Single"), claimSrc, "channel")),
			want: claimPlan{Kind: KindChannel, DomainID: testUID, AllocationMode: "Single",
				Devices: []allocatedDevice{{Request: "channel", Pool: "n1", Device: "channel-0", Kind: KindChannel}}},
		},
		"claim config overrides class config": {
			claim: allocation([]resourcev1.DeviceRequestAllocationResult{result("channel", "channel-3")},
				opaque(cdv1beta1.DriverName, channelCfg("class-uid", "Single"), classSrc),
				opaque(cdv1beta1.DriverName, channelCfg(testUID, "All"), claimSrc)),
			want: claimPlan{Kind: KindChannel, DomainID: testUID, AllocationMode: "All",
				Devices: []allocatedDevice{{Request: "channel", Pool: "n1", Device: "channel-3", Kind: KindChannel, ID: 3}}},
		},
		"subrequest matches its request's config": {
			claim: allocation([]resourcev1.DeviceRequestAllocationResult{result("channel/any", "channel-0")},
				opaque(cdv1beta1.DriverName, channelCfg(testUID, "Single"), claimSrc, "channel")),
			want: claimPlan{Kind: KindChannel, DomainID: testUID, AllocationMode: "Single",
				Devices: []allocatedDevice{{Request: "channel/any", Pool: "n1", Device: "channel-0", Kind: KindChannel}}},
		},
		"other drivers are ignored": {
			claim: allocation([]resourcev1.DeviceRequestAllocationResult{
				{Request: "gpu", Driver: "gpu.nvidia.com", Pool: "n1", Device: "gpu-0"}, result("daemon", "daemon-0")},
				opaque("gpu.nvidia.com", `{"anything":1}`, claimSrc),
				opaque(cdv1beta1.DriverName, daemonCfg, claimSrc, "daemon")),
			want: claimPlan{Kind: KindDaemon, DomainID: testUID,
				Devices: []allocatedDevice{{Request: "daemon", Pool: "n1", Device: "daemon-0", Kind: KindDaemon}}},
		},
		"bad config anywhere is refused": {
			claim: allocation([]resourcev1.DeviceRequestAllocationResult{result("channel", "channel-0")},
				opaque(cdv1beta1.DriverName, channelCfg(testUID, "Single"), claimSrc, "channel"),
				opaque(cdv1beta1.DriverName, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"x","unexpectedField":1}`, claimSrc, "other")),
			wantErr: `status.allocation.devices.config[1].opaque.parameters: opaque config ComputeDomainChannelConfig: unknown field "unexpectedField"`,
		},
		"no config": {
			claim:   allocation([]resourcev1.DeviceRequestAllocationResult{result("channel", "channel-0")}),
			wantErr: `request "channel": no opaque config of driver compute-domain.nvidia.com applies`,
		},
		"config for another request": {
			claim: allocation([]resourcev1.DeviceRequestAllocationResult{result("channel", "channel-0")},
				opaque(cdv1beta1.DriverName, channelCfg(testUID, "Single"), claimSrc, "other")),
			wantErr: "no opaque config",
		},
		"daemon config on a channel": {
			claim: allocation([]resourcev1.DeviceRequestAllocationResult{result("channel", "channel-0")},
				opaque(cdv1beta1.DriverName, daemonCfg, claimSrc)),
			wantErr: "a channel device needs a ComputeDomainChannelConfig, got a ComputeDomainDaemonConfig",
		},
		"channel and daemon mixed": {
			claim: allocation([]resourcev1.DeviceRequestAllocationResult{result("a", "channel-0"), result("b", "daemon-0")},
				opaque(cdv1beta1.DriverName, channelCfg(testUID, "Single"), claimSrc, "a"),
				opaque(cdv1beta1.DriverName, daemonCfg, claimSrc, "b")),
			wantErr: "both channel and daemon devices",
		},
		"two domains": {
			claim: allocation([]resourcev1.DeviceRequestAllocationResult{result("a", "channel-0"), result("b", "channel-1")},
				opaque(cdv1beta1.DriverName, channelCfg(testUID, "Single"), claimSrc, "a"),
				opaque(cdv1beta1.DriverName, channelCfg("other-uid", "Single"), claimSrc, "b")),
			wantErr: "different ComputeDomains",
		},
		"unknown device": {
			claim: allocation([]resourcev1.DeviceRequestAllocationResult{result("channel", "gpu-0")},
				opaque(cdv1beta1.DriverName, channelCfg(testUID, "Single"), claimSrc)),
			wantErr: `device "gpu-0" is not one this driver publishes`,
		},
		"nothing of this driver": {
			claim:   allocation(nil),
			wantErr: "no device of driver compute-domain.nvidia.com",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := planClaim(tc.claim)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !IsPermanent(err) {
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
	if _, err := planClaim(&resourcev1.ResourceClaim{}); !IsRetryable(err) {
		t.Errorf("unallocated claim: %v, want a retryable error", err)
	}
}
