package kubelet

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

func TestApplyCDIEdits(t *testing.T) {
	const node = "/s/nodes/a"
	for name, tc := range map[string]struct {
		edits []*cdispec.ContainerEdits
		want  Edits
	}{
		"nothing": {},
		"env in order, later wins": {
			edits: []*cdispec.ContainerEdits{{Env: []string{"A=1", "B=2"}}, {Env: []string{"A=3", "C"}}},
			want:  Edits{Env: []EnvVar{{Name: "A", Value: "3"}, {Name: "B", Value: "2"}, {Name: "C"}}},
		},
		"device nodes remapped": {
			edits: []*cdispec.ContainerEdits{{DeviceNodes: []*cdispec.DeviceNode{
				{Path: "/dev/nvidia-caps-imex-channels/channel0"},
				{Path: "/dev/nvidia-caps/nvidia-cap1", HostPath: "/s/nodes/a/dev/nvidia-caps/nvidia-cap1"},
				{Path: "/dev/x", HostPath: "/dev/y"},
			}}},
			want: Edits{Devices: []Device{
				{ContainerPath: "/dev/nvidia-caps-imex-channels/channel0", HostPath: node + "/dev/nvidia-caps-imex-channels/channel0"},
				{ContainerPath: "/dev/nvidia-caps/nvidia-cap1", HostPath: node + "/dev/nvidia-caps/nvidia-cap1"},
				{ContainerPath: "/dev/x", HostPath: node + "/dev/y"},
			}},
		},
		"mounts remapped, read-only kept, later replaces": {
			edits: []*cdispec.ContainerEdits{
				{Mounts: []*cdispec.Mount{
					{ContainerPath: "/etc/nvidia-imex", HostPath: "/var/lib/x"},
					{ContainerPath: "/lib/y", HostPath: node + "/lib/y", Options: []string{"ro", "bind"}},
				}},
				{Mounts: []*cdispec.Mount{{ContainerPath: "/etc/nvidia-imex", HostPath: "/var/lib/z"}}},
			},
			want: Edits{Mounts: []Mount{
				{ContainerPath: "/lib/y", HostPath: node + "/lib/y", ReadOnly: true},
				{ContainerPath: "/etc/nvidia-imex", HostPath: node + "/var/lib/z"},
			}},
		},
		"hooks ignored": {
			edits: []*cdispec.ContainerEdits{{Hooks: []*cdispec.Hook{{HookName: "createContainer", Path: "/bin/true"}}}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, applyCDIEdits(node, tc.edits)); diff != "" {
				t.Errorf("edits (-want +got):\n%s", diff)
			}
		})
	}
}

func writeSpec(t *testing.T, dir, name string, spec cdispec.Spec) {
	t.Helper()
	data, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCDIResolve: ids resolve from both CDI directories of the node, the spec's edits first
// (once per spec) and then the device's; a spec written after the first resolution is seen;
// an unknown id is an error.
func TestCDIResolve(t *testing.T) {
	node := t.TempDir()
	writeSpec(t, filepath.Join(node, "etc/cdi"), "static.json", cdispec.Spec{
		Version: "0.6.0", Kind: "example.com/gpu",
		ContainerEdits: cdispec.ContainerEdits{Env: []string{"SPEC=1"}},
		Devices: []cdispec.Device{
			{Name: "a", ContainerEdits: cdispec.ContainerEdits{Env: []string{"DEV=a"}}},
			{Name: "b", ContainerEdits: cdispec.ContainerEdits{Env: []string{"DEV=b"}}},
		},
	})
	r := &cdiResolver{nodeDir: node}
	edits, err := r.resolve([]string{"example.com/gpu=a", "example.com/gpu=b"})
	if err != nil {
		t.Fatal(err)
	}
	got := applyCDIEdits(node, edits)
	if diff := cmp.Diff([]EnvVar{{Name: "SPEC", Value: "1"}, {Name: "DEV", Value: "b"}}, got.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	var envs [][]string
	for _, e := range edits {
		envs = append(envs, e.Env)
	}
	if diff := cmp.Diff([][]string{{"SPEC=1"}, {"DEV=a"}, {"DEV=b"}}, envs); diff != "" {
		t.Errorf("edits in order (-want +got):\n%s", diff)
	}

	writeSpec(t, filepath.Join(node, "var/run/cdi"), "claim.json", cdispec.Spec{
		Version: "0.6.0", Kind: "k8s.example.com/claim",
		Devices: []cdispec.Device{{Name: "c", ContainerEdits: cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/c"}}}}},
	})
	edits, err = r.resolve([]string{"k8s.example.com/claim=c"})
	if err != nil {
		t.Fatalf("resolving a spec written later: %v", err)
	}
	if diff := cmp.Diff([]Device{{ContainerPath: "/dev/c", HostPath: node + "/dev/c"}}, applyCDIEdits(node, edits).Devices); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
	if _, err := r.resolve([]string{"k8s.example.com/claim=nope"}); err == nil {
		t.Error("an unknown device resolved")
	}
}
