package devices

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Names of the NVIDIA character devices in /proc/devices and of their directories.
const (
	channelMajorName = "nvidia-caps-imex-channels"
	capsMajorName    = "nvidia-caps"
	capsDirName      = "nvidia-caps"

	// DefaultIMEXMgmtCapability is the capability file whose DeviceFileMinor names the IMEX
	// management device /dev/nvidia-caps/nvidia-cap<minor>.
	DefaultIMEXMgmtCapability = "/proc/driver/nvidia/capabilities/fabric-imex-mgmt"
	// DefaultProcDevices lists the character devices' major numbers.
	DefaultProcDevices = "/proc/devices"

	// ContainerChannelDir is where IMEX channels appear in a container.
	ContainerChannelDir = "/dev/nvidia-caps-imex-channels"
)

// Nodes describes the node's IMEX device nodes for CDI. It only reads the device numbers
// (and the management device's mode) from the host's /proc files, through readFile: the
// container runtime creates each node inside the container from its CDI description, so the
// plugin creates nothing in the host's /dev.
type Nodes struct {
	ProcDevices string
	MgmtCapFile string
	ReadFile    func(string) ([]byte, error)
}

// Channels returns the CDI device nodes of the given channels.
func (d Nodes) Channels(ids []int) ([]*cdispec.DeviceNode, error) {
	data, err := d.ReadFile(d.ProcDevices)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", d.ProcDevices, err)
	}
	major, ok := ParseProcDevices(data, channelMajorName)
	if !ok {
		return nil, fmt.Errorf("%s lists no %s character device: is the NVIDIA driver loaded?", d.ProcDevices, channelMajorName)
	}
	nodes := make([]*cdispec.DeviceNode, 0, len(ids))
	for _, n := range ids {
		path := fmt.Sprintf("%s/channel%d", ContainerChannelDir, n)
		nodes = append(nodes, &cdispec.DeviceNode{Path: path, Type: "c", Major: major, Minor: int64(n)})
	}
	return nodes, nil
}

// IMEXMgmt returns the CDI device node of the IMEX management device, with the mode the
// driver gives it (DeviceFileMode of its capability file; without one, the runtime's default).
func (d Nodes) IMEXMgmt() (*cdispec.DeviceNode, error) {
	capData, err := d.ReadFile(d.MgmtCapFile)
	if err != nil {
		return nil, fmt.Errorf("reading the IMEX management capability %s: %w", d.MgmtCapFile, err)
	}
	minor, err := ParseCapabilityMinor(capData)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.MgmtCapFile, err)
	}
	mode, hasMode, err := ParseCapabilityMode(capData)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.MgmtCapFile, err)
	}
	devData, err := d.ReadFile(d.ProcDevices)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", d.ProcDevices, err)
	}
	major, ok := ParseProcDevices(devData, capsMajorName)
	if !ok {
		return nil, fmt.Errorf("%s lists no %s character device", d.ProcDevices, capsMajorName)
	}
	node := &cdispec.DeviceNode{Path: fmt.Sprintf("/dev/%s/nvidia-cap%d", capsDirName, minor), Type: "c", Major: major, Minor: minor}
	if hasMode {
		node.FileMode = &mode
	}
	return node, nil
}

// ParseProcDevices returns the major number of a character device named name in the content of
// /proc/devices.
func ParseProcDevices(data []byte, name string) (int64, bool) {
	inChar := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "Character devices:":
			inChar = true
			continue
		case strings.HasSuffix(line, "devices:"):
			inChar = false
			continue
		}
		fields := strings.Fields(line)
		if !inChar || len(fields) != 2 || fields[1] != name {
			continue
		}
		if major, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
			return major, true
		}
	}
	return 0, false
}

// ParseCapabilityMinor reads "DeviceFileMinor: N" from an NVIDIA capability file.
func ParseCapabilityMinor(data []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(key) != "DeviceFileMinor" {
			continue
		}
		minor, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		if err != nil || minor < 0 {
			return 0, fmt.Errorf("DeviceFileMinor %q is not a device number", strings.TrimSpace(value))
		}
		return minor, nil
	}
	return 0, errors.New("no DeviceFileMinor line")
}

// ParseCapabilityMode reads "DeviceFileMode: N" (the device node's permission bits, in decimal)
// from an NVIDIA capability file; ok is false when there is no such line.
func ParseCapabilityMode(data []byte) (mode os.FileMode, ok bool, err error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, value, found := strings.Cut(sc.Text(), ":")
		if !found || strings.TrimSpace(key) != "DeviceFileMode" {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(value), 10, 32)
		if err != nil || n > 0o777 {
			return 0, false, fmt.Errorf("DeviceFileMode %q is not a permission mode", strings.TrimSpace(value))
		}
		return os.FileMode(n), true, nil
	}
	return 0, false, nil
}
