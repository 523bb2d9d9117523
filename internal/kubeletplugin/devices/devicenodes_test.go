package devices

import (
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

// The device nodes reach containers through CDI only: their numbers (and the management
// device's mode) come from /proc, and nothing is created on the host.
func TestDeviceNodes(t *testing.T) {
	root := t.TempDir()
	proc := filepath.Join(root, "devices")
	capFile := filepath.Join(root, "fabric-imex-mgmt")
	if err := os.WriteFile(proc, []byte("Character devices:\n234 nvidia-caps-imex-channels\n235 nvidia-caps\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(capFile, []byte("DeviceFileMinor: 3\nDeviceFileMode: 256\nDeviceFileModify: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fromFiles := Nodes{ProcDevices: proc, MgmtCapFile: capFile, ReadFile: os.ReadFile}
	nodes, err := fromFiles.Channels([]int{0, 5})
	if err != nil {
		t.Fatal(err)
	}
	want := []*cdispec.DeviceNode{
		{Path: "/dev/nvidia-caps-imex-channels/channel0", Type: "c", Major: 234, Minor: 0},
		{Path: "/dev/nvidia-caps-imex-channels/channel5", Type: "c", Major: 234, Minor: 5},
	}
	if diff := cmp.Diff(want, nodes); diff != "" {
		t.Errorf("channels (-want +got):\n%s", diff)
	}
	mgmt, err := fromFiles.IMEXMgmt()
	if err != nil {
		t.Fatal(err)
	}
	mode := os.FileMode(0o400)
	if diff := cmp.Diff(&cdispec.DeviceNode{Path: "/dev/nvidia-caps/nvidia-cap3", Type: "c", Major: 235, Minor: 3, FileMode: &mode}, mgmt); diff != "" {
		t.Errorf("IMEX management device (-want +got):\n%s", diff)
	}
	entries, err := os.ReadDir(root)
	if err != nil || len(entries) != 2 {
		t.Errorf("files under the test root: %v (%v), want only the two /proc files: nothing created", entries, err)
	}

	noDriver := fromFiles
	noDriver.ProcDevices = capFile
	if _, err := noDriver.Channels([]int{0}); err == nil || !strings.Contains(err.Error(), "is the NVIDIA driver loaded") {
		t.Errorf("without the driver: %v", err)
	}
}

func TestParseCapabilityMode(t *testing.T) {
	cases := map[string]struct {
		data string
		mode os.FileMode
		ok   bool
		err  bool
	}{
		"driver format": {data: "DeviceFileMinor: 1\nDeviceFileMode: 256\n", mode: 0o400, ok: true},
		"0666":          {data: "DeviceFileMode: 438\n", mode: 0o666, ok: true},
		"absent":        {data: "DeviceFileMinor: 1\n"},
		"not a mode":    {data: "DeviceFileMode: 4096\n", err: true},
		"garbage":       {data: "DeviceFileMode: rw\n", err: true},
	}
	for name, tc := range cases {
		mode, ok, err := ParseCapabilityMode([]byte(tc.data))
		if mode != tc.mode || ok != tc.ok || (err != nil) != tc.err {
			t.Errorf("%s: %v %v %v, want %v %v err=%v", name, mode, ok, err, tc.mode, tc.ok, tc.err)
		}
	}
}
