package kubeletplugin

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Names of the NVIDIA character devices in /proc/devices and of their directories.
const (
	channelMajorName = "nvidia-caps-imex-channels"
	capsMajorName    = "nvidia-caps"
	channelDirName   = "nvidia-caps-imex-channels"
	capsDirName      = "nvidia-caps"

	// DefaultIMEXMgmtCapability is the capability file whose DeviceFileMinor names the IMEX
	// management device /dev/nvidia-caps/nvidia-cap<minor>.
	DefaultIMEXMgmtCapability = "/proc/driver/nvidia/capabilities/fabric-imex-mgmt"
	// DefaultProcDevices lists the character devices' major numbers.
	DefaultProcDevices = "/proc/devices"
)

// deviceNodes knows where the node's IMEX device nodes are and how to create missing channels.
// The device numbers come from the host's /proc files (read through readFile); root is the
// host directory standing for /dev (/dev on a GPU node).
type deviceNodes struct {
	root           string
	procDevices    string
	mgmtCapFile    string
	readFile       func(string) ([]byte, error)
	makeCharDevice func(path string, major, minor uint32) error
}

func (d deviceNodes) hostPath(containerPath string) string {
	rel := strings.TrimPrefix(containerPath, "/dev/")
	if filepath.Clean(d.root) == "/dev" {
		return ""
	}
	return filepath.Join(d.root, rel)
}

func (d deviceNodes) onHost(containerPath string) string {
	if p := d.hostPath(containerPath); p != "" {
		return p
	}
	return containerPath
}

// channels returns the CDI device nodes of the given channels, creating the ones missing on the
// host.
func (d deviceNodes) channels(ids []int) ([]*cdispec.DeviceNode, error) {
	data, err := d.readFile(d.procDevices)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", d.procDevices, err)
	}
	major, ok := ParseProcDevices(data, channelMajorName)
	if !ok {
		return nil, fmt.Errorf("%s lists no %s character device: is the NVIDIA driver loaded?", d.procDevices, channelMajorName)
	}
	if err := os.MkdirAll(filepath.Join(d.root, channelDirName), 0o755); err != nil {
		return nil, fmt.Errorf("creating the channel directory: %w", err)
	}
	nodes := make([]*cdispec.DeviceNode, 0, len(ids))
	for _, n := range ids {
		path := fmt.Sprintf("%s/channel%d", ContainerChannelDir, n)
		node := &cdispec.DeviceNode{Path: path, HostPath: d.hostPath(path), Type: "c", Major: major, Minor: int64(n)}
		if err := d.ensure(d.onHost(path), major, int64(n)); err != nil {
			return nil, err
		}
		nodes = append(nodes, node)
	}
	return nodes, nil
}

// imexMgmt returns the CDI device node of the IMEX management device.
func (d deviceNodes) imexMgmt() (*cdispec.DeviceNode, error) {
	capData, err := d.readFile(d.mgmtCapFile)
	if err != nil {
		return nil, fmt.Errorf("reading the IMEX management capability %s: %w", d.mgmtCapFile, err)
	}
	minor, err := ParseCapabilityMinor(capData)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.mgmtCapFile, err)
	}
	devData, err := d.readFile(d.procDevices)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", d.procDevices, err)
	}
	major, ok := ParseProcDevices(devData, capsMajorName)
	if !ok {
		return nil, fmt.Errorf("%s lists no %s character device", d.procDevices, capsMajorName)
	}
	path := fmt.Sprintf("/dev/%s/nvidia-cap%d", capsDirName, minor)
	if err := d.ensure(d.onHost(path), major, minor); err != nil {
		return nil, err
	}
	return &cdispec.DeviceNode{Path: path, HostPath: d.hostPath(path), Type: "c", Major: major, Minor: minor}, nil
}

// ensure creates a missing character device node.
func (d deviceNodes) ensure(path string, major, minor int64) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := d.makeCharDevice(path, uint32(major), uint32(minor)); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating device node %s (%d:%d): %w", path, major, minor, err)
	}
	return nil
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
