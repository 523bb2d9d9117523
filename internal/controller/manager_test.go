package controller

import (
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestClaimAllocationOnly: the claim cache keeps what membership reads (labels, allocation) and
// drops the rest.
func TestClaimAllocationOnly(t *testing.T) {
	alloc := &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
		Results: []resourcev1.DeviceRequestAllocationResult{{Request: "channel", Driver: "compute-domain.nvidia.com", Pool: "n1", Device: "channel-0"}}}}
	c := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", Labels: map[string]string{"a": "b"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kcm"}}},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "channel"}}}},
		Status: resourcev1.ResourceClaimStatus{Allocation: alloc,
			ReservedFor: []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "u"}},
			Devices:     []resourcev1.AllocatedDeviceStatus{{Driver: "compute-domain.nvidia.com", Pool: "n1", Device: "channel-0"}}},
	}
	out, err := claimAllocationOnly(c)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*resourcev1.ResourceClaim)
	if got.Labels["a"] != "b" || got.Status.Allocation != alloc || got.ManagedFields != nil ||
		len(got.Spec.Devices.Requests) != 0 || got.Status.ReservedFor != nil || got.Status.Devices != nil {
		t.Errorf("transformed claim: %+v", got)
	}
}
