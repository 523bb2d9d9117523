package devices

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

func TestDevices(t *testing.T) {
	devs := Devices(3, "alpha", true)
	want := []resourcev1.Device{
		{Name: "channel-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type": {StringValue: ptr.To("channel")}, "id": {IntValue: ptr.To(int64(0))}, "controlPlane": {StringValue: ptr.To("alpha")}}},
		{Name: "channel-1", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type": {StringValue: ptr.To("channel")}, "id": {IntValue: ptr.To(int64(1))}, "controlPlane": {StringValue: ptr.To("alpha")}}},
		{Name: "channel-2", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type": {StringValue: ptr.To("channel")}, "id": {IntValue: ptr.To(int64(2))}, "controlPlane": {StringValue: ptr.To("alpha")}}},
		{Name: "daemon-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type": {StringValue: ptr.To("daemon")}, "controlPlane": {StringValue: ptr.To("alpha")}}},
	}
	if diff := cmp.Diff(want, devs); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if cp := Devices(1, "", true)[0].Attributes[AttributeControlPlane].StringValue; cp == nil || *cp != "" {
		t.Errorf("legacy plane controlPlane attribute %v, want the empty string", cp)
	}
	// Host-managed IMEX: no daemon runs, so no daemon device is published.
	if diff := cmp.Diff(want[:3], Devices(3, "alpha", false)); diff != "" {
		t.Errorf("without the daemon device (-want +got):\n%s", diff)
	}
}

func TestSplitSlices(t *testing.T) {
	cases := map[string]struct {
		devices, perSlice int
		want              []int
	}{
		"full node":      {devices: MaxChannels + 1, perSlice: MaxDevicesPerSlice, want: append(repeat(128, 16), 1)},
		"exact multiple": {devices: 256, perSlice: 128, want: []int{128, 128}},
		"small":          {devices: 5, perSlice: 128, want: []int{5}},
		"none":           {devices: 0, perSlice: 128, want: []int{0}},
		"default size":   {devices: 130, perSlice: 0, want: []int{128, 2}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			devs := make([]resourcev1.Device, tc.devices)
			for i := range devs {
				devs[i].Name = ChannelDeviceName(i)
			}
			slices := SplitSlices(devs, tc.perSlice)
			var sizes []int
			next := 0
			for _, s := range slices {
				sizes = append(sizes, len(s.Devices))
				for _, d := range s.Devices {
					if d.Name != ChannelDeviceName(next) {
						t.Fatalf("device %s out of order, want %s", d.Name, ChannelDeviceName(next))
					}
					next++
				}
			}
			if diff := cmp.Diff(tc.want, sizes); diff != "" {
				t.Errorf("slice sizes (-want +got):\n%s", diff)
			}
		})
	}
	res := NodeResources("n1", MaxChannels, "", true)
	if len(res.Pools) != 1 || len(res.Pools["n1"].Slices) != 17 {
		t.Errorf("a full node publishes %d pools / %d slices, want 1 pool of 17 slices", len(res.Pools), len(res.Pools["n1"].Slices))
	}
}

func repeat(v, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestParseDeviceName(t *testing.T) {
	cases := map[string]struct {
		kind  DeviceKind
		id    int
		valid bool
	}{
		"channel-0":    {KindChannel, 0, true},
		"channel-2047": {KindChannel, 2047, true},
		"daemon-0":     {KindDaemon, 0, true},
		"channel-2048": {},
		"channel-01":   {},
		"channel--1":   {},
		"channel-":     {},
		"daemon-1":     {},
		"gpu-0":        {},
	}
	for name, tc := range cases {
		kind, id, err := ParseDeviceName(name)
		if (err == nil) != tc.valid || kind != tc.kind || id != tc.id {
			t.Errorf("%s: got %q %d %v, want %q %d valid=%v", name, kind, id, err, tc.kind, tc.id, tc.valid)
		}
	}
}
