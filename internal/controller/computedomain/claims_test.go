package computedomain

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/testutil"
)

func onNode(node string) *corev1.NodeSelector {
	return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
		Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
	}}}}}
}

func TestChannelClaimNode(t *testing.T) {
	channelConfig := func(uid string) string {
		return `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"` + uid + `","allocationMode":"Single"}`
	}
	// allocated is a claim of the domain as the scheduler leaves it on node n1.
	allocated := func() *testutil.ResourceClaimWrapper {
		return testutil.MakeResourceClaim("c", "ns").Label(cdv1beta1.ComputeDomainLabel, testUID).
			Request("channel", cdv1beta1.ChannelDeviceClass).
			Device("channel", cdv1beta1.DriverName, "n1", "channel-0").
			AllocatedConfig(resourcev1.AllocationConfigSourceClaim, cdv1beta1.DriverName, channelConfig(testUID), "channel")
	}
	with := func(w *testutil.ResourceClaimWrapper, f func(*resourcev1.ResourceClaim)) *resourcev1.ResourceClaim {
		c := w.Obj()
		if c.Status.Allocation != nil {
			c.Status.Allocation.NodeSelector = onNode("n1")
		}
		f(c)
		return c
	}
	keep := func(*resourcev1.ResourceClaim) {}
	cases := map[string]struct {
		claim *resourcev1.ResourceClaim
		want  string
	}{
		"allocated on n1 for the domain": {claim: with(allocated(), keep), want: "n1"},
		"a config for all requests":      {claim: with(allocated(), func(c *resourcev1.ResourceClaim) { c.Status.Allocation.Devices.Config[0].Requests = nil }), want: "n1"},
		"a sub-request result configured by its request": {
			claim: with(allocated(), func(c *resourcev1.ResourceClaim) { c.Status.Allocation.Devices.Results[0].Request = "channel/a" }), want: "n1",
		},
		"not allocated (only labelled)": {claim: testutil.MakeResourceClaim("c", "ns").Label(cdv1beta1.ComputeDomainLabel, testUID).Obj()},
		"in another namespace":          {claim: with(allocated(), func(c *resourcev1.ResourceClaim) { c.Namespace = "other" })},
		"being deleted": {claim: with(allocated(), func(c *resourcev1.ResourceClaim) {
			c.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		})},
		"another domain's config": {claim: with(allocated(), func(c *resourcev1.ResourceClaim) {
			c.Status.Allocation.Devices.Config[0].Opaque.Parameters.Raw = []byte(channelConfig("other-uid"))
		})},
		"a daemon config of the domain": {claim: with(allocated(), func(c *resourcev1.ResourceClaim) {
			c.Status.Allocation.Devices.Config[0].Opaque.Parameters.Raw = []byte(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainDaemonConfig","domainID":"` + testUID + `"}`)
		})},
		"a config of another driver": {claim: with(allocated(), func(c *resourcev1.ResourceClaim) {
			c.Status.Allocation.Devices.Config[0].Opaque.Driver = "gpu.nvidia.com"
		})},
		"a config for another request": {claim: with(allocated(), func(c *resourcev1.ResourceClaim) {
			c.Status.Allocation.Devices.Config[0].Requests = []string{"other"}
		})},
		"a device of another driver": {claim: with(allocated(), func(c *resourcev1.ResourceClaim) {
			c.Status.Allocation.Devices.Results[0].Driver = "gpu.nvidia.com"
		})},
		"a pool named after another node than the selector's": {claim: with(allocated(), func(c *resourcev1.ResourceClaim) {
			c.Status.Allocation.Devices.Results[0].Pool = "n2"
		})},
		"no node selector": {claim: with(allocated(), func(c *resourcev1.ResourceClaim) { c.Status.Allocation.NodeSelector = nil })},
		"a selector of several nodes": {claim: with(allocated(), func(c *resourcev1.ResourceClaim) {
			c.Status.Allocation.NodeSelector.NodeSelectorTerms[0].MatchFields[0].Values = []string{"n1", "n2"}
		})},
		"a selector by label": {claim: with(allocated(), func(c *resourcev1.ResourceClaim) {
			c.Status.Allocation.NodeSelector.NodeSelectorTerms[0].MatchFields[0].Key = "metadata.labels"
		})},
	}
	// One parser across every case, as a pass shares one across its claims: what it remembers of
	// one config never answers for another.
	shared := domainParser{}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := channelClaimNode(tc.claim, "ns", testUID, channelDomain); got != tc.want {
				t.Errorf("channelClaimNode = %q, want %q", got, tc.want)
			}
			for range 2 {
				if got := channelClaimNode(tc.claim, "ns", testUID, shared.parse); got != tc.want {
					t.Errorf("channelClaimNode with a pass's parser = %q, want %q", got, tc.want)
				}
			}
		})
	}
	if len(shared) < 2 {
		t.Errorf("the pass's parser remembers %d configs, want one per distinct config seen (at least 2)", len(shared))
	}
}
