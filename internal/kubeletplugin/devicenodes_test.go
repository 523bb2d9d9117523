package kubeletplugin

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

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
