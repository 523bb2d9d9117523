// Package devices is what the kubelet plugin discovers of its node and publishes: the devices
// and their ResourceSlices (Publisher), the IMEX device nodes, the NVIDIA driver root (the files
// a daemon container gets, the loaded driver's version, the host IMEX service), NVML under the
// driver root, and the node's NVLink clique (CliqueTracker).
package devices

import (
	"fmt"
	"strconv"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"
)

// Devices and attributes this driver publishes.
const (
	// MaxChannels is the number of IMEX channels a node has: channel0 … channel2047.
	MaxChannels = 2048
	// DefaultNumChannels is how many channel devices a node publishes by default: channel-0
	// only. The channel DeviceClass (compute-domain-default-channel.nvidia.com) selects id 0, so
	// no claim of a domain's template can be allocated another channel; publishing all 2048
	// costs 17 slices per node, all cached by the scheduler, for devices nothing allocates
	// (see docs/scale.md, "Design choices and what was measured"). Clusters with DeviceClasses
	// of their own for other channels raise --num-channels.
	DefaultNumChannels = 1
	// ChannelDevicePrefix starts the name of every channel device: channel-0 … channel-2047.
	ChannelDevicePrefix = "channel-"
	// DaemonDeviceName is the one daemon device of a node.
	DaemonDeviceName = "daemon-0"
	// MaxDevicesPerSlice is the most devices one published ResourceSlice holds.
	MaxDevicesPerSlice = resourcev1.ResourceSliceMaxDevices

	// AttributeType is "channel" or "daemon".
	AttributeType = "type"
	// AttributeID is a channel's number.
	AttributeID = "id"
	// AttributeControlPlane is the control-plane id of the plugin that published the device,
	// empty for the legacy plane.
	AttributeControlPlane = "controlPlane"

	// TypeChannel and TypeDaemon are the values of AttributeType.
	TypeChannel = "channel"
	TypeDaemon  = "daemon"
)

// DeviceKind says what a device of this driver is: a channel or the daemon device.
type DeviceKind string

// Kinds of device, equal to their type attribute.
const (
	KindChannel DeviceKind = TypeChannel
	KindDaemon  DeviceKind = TypeDaemon
)

// ChannelDeviceName is the published name of channel n.
func ChannelDeviceName(n int) string { return ChannelDevicePrefix + strconv.Itoa(n) }

// ParseDeviceName reads a device name this driver publishes: channel-N (0 <= N < MaxChannels)
// gives the channel kind and N, daemon-0 the daemon kind and 0.
func ParseDeviceName(name string) (DeviceKind, int, error) {
	if name == DaemonDeviceName {
		return KindDaemon, 0, nil
	}
	digits, ok := strings.CutPrefix(name, ChannelDevicePrefix)
	if ok && digits != "" && (digits == "0" || digits[0] != '0') {
		if n, err := strconv.Atoi(digits); err == nil && n >= 0 && n < MaxChannels {
			return KindChannel, n, nil
		}
	}
	return "", 0, fmt.Errorf("device %q is not one this driver publishes (%s0…%s%d, %s)",
		name, ChannelDevicePrefix, ChannelDevicePrefix, MaxChannels-1, DaemonDeviceName)
}

// Devices returns the devices of one node: channel-0 … channel-(numChannels-1), then daemon-0
// when withDaemon (not in host-managed mode, where no daemon runs), each with the type
// attribute, channels with their id, and all with the controlPlane attribute (empty for the
// legacy plane).
func Devices(numChannels int, controlPlane string, withDaemon bool) []resourcev1.Device {
	devices := make([]resourcev1.Device, 0, numChannels+1)
	for n := range numChannels {
		devices = append(devices, resourcev1.Device{
			Name: ChannelDeviceName(n),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				AttributeType:         {StringValue: ptr.To(TypeChannel)},
				AttributeID:           {IntValue: ptr.To(int64(n))},
				AttributeControlPlane: {StringValue: ptr.To(controlPlane)},
			},
		})
	}
	if !withDaemon {
		return devices
	}
	devices = append(devices, resourcev1.Device{
		Name: DaemonDeviceName,
		Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			AttributeType:         {StringValue: ptr.To(TypeDaemon)},
			AttributeControlPlane: {StringValue: ptr.To(controlPlane)},
		},
	})
	return devices
}

// SplitSlices cuts devices, in order, into slices of at most perSlice devices each. No devices
// still give one empty slice, so that the pool exists.
func SplitSlices(devices []resourcev1.Device, perSlice int) []resourceslice.Slice {
	if perSlice <= 0 {
		perSlice = MaxDevicesPerSlice
	}
	slices := []resourceslice.Slice{}
	for start := 0; start < len(devices); start += perSlice {
		end := min(start+perSlice, len(devices))
		slices = append(slices, resourceslice.Slice{Devices: devices[start:end]})
	}
	if len(slices) == 0 {
		slices = append(slices, resourceslice.Slice{})
	}
	return slices
}

// NodeResources is what a node publishes: one pool named after the node, its devices split into
// slices of at most MaxDevicesPerSlice.
func NodeResources(nodeName string, numChannels int, controlPlane string, withDaemon bool) resourceslice.DriverResources {
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		nodeName: {Slices: SplitSlices(Devices(numChannels, controlPlane, withDaemon), MaxDevicesPerSlice)},
	}}
}
