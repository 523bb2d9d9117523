package kubelet

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"cdplane/internal/sim/imexsim"
)

// Every container learns where its /etc/hosts and /etc/resolv.conf lie on the host and its
// pod's address, the simulated IMEX's stand-ins; a pod that mounts its own files there gets
// those.
func TestStandInEnv(t *testing.T) {
	cases := map[string]struct {
		mappings []PathMapping
		podIP    string
		want     []EnvVar
	}{
		"kubelet-managed files": {
			mappings: []PathMapping{
				{ContainerPath: EtcHostsPath, HostPath: "/pods/p/etc-hosts"},
				{ContainerPath: EtcResolvConfPath, HostPath: "/pods/p/resolv.conf"},
			},
			podIP: "127.128.0.7",
			want: []EnvVar{
				{Name: imexsim.HostsFileEnv, Value: "/pods/p/etc-hosts"},
				{Name: imexsim.ResolvConfEnv, Value: "/pods/p/resolv.conf"},
				{Name: imexsim.LocalAddrsEnv, Value: "127.128.0.7"},
			},
		},
		"the pod's own /etc": {
			mappings: []PathMapping{{ContainerPath: "/etc", HostPath: "/vol/etc"}},
			podIP:    "127.10.0.1",
			want: []EnvVar{
				{Name: imexsim.HostsFileEnv, Value: "/vol/etc/hosts"},
				{Name: imexsim.ResolvConfEnv, Value: "/vol/etc/resolv.conf"},
				{Name: imexsim.LocalAddrsEnv, Value: "127.10.0.1"},
			},
		},
		"nothing mapped, no address": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, standInEnv(NewPathMap(tc.mappings), tc.podIP)); diff != "" {
				t.Errorf("stand-ins (-want +got):\n%s", diff)
			}
		})
	}
}

// The container's view lists its mounts and its device nodes, container path to host path; a
// device node whose host file is not on the node is left out, and a device replaces a mount at
// the same path.
func TestContainerPaths(t *testing.T) {
	node := t.TempDir()
	for _, p := range []string{"dev/nvidiactl", "dev/nvidia-caps/nvidia-cap1", "dev/shadowed"} {
		writeFile(t, filepath.Join(node, p), "")
	}
	mounts := []Mount{
		{ContainerPath: "/etc/hosts", HostPath: "/pods/p/etc-hosts"},
		{ContainerPath: "/usr/local/nvidia/lib/libnvidia-ml.so.1/", HostPath: node + "/usr/lib/libnvidia-ml.so.1", ReadOnly: true},
		{ContainerPath: "/dev/shadowed", HostPath: "/pods/p/vol"},
		{ContainerPath: "relative", HostPath: "/pods/p/x"},
	}
	devices := []Device{
		{ContainerPath: "/dev/nvidiactl", HostPath: node + "/dev/nvidiactl"},
		{ContainerPath: "/dev/nvidia-caps/nvidia-cap1", HostPath: node + "/dev/nvidia-caps/nvidia-cap1"},
		{ContainerPath: "/dev/nvidia-caps-imex-channels/channel0", HostPath: node + "/dev/nvidia-caps-imex-channels/channel0"},
		{ContainerPath: "/dev/shadowed", HostPath: node + "/dev/shadowed"},
	}
	got, err := imexsim.DecodeContainerPaths(containerPaths(mounts, devices))
	if err != nil {
		t.Fatalf("decoding the view: %v", err)
	}
	want := map[string]string{
		"/etc/hosts": "/pods/p/etc-hosts",
		"/usr/local/nvidia/lib/libnvidia-ml.so.1": node + "/usr/lib/libnvidia-ml.so.1",
		"/dev/shadowed":                node + "/dev/shadowed",
		"/dev/nvidiactl":               node + "/dev/nvidiactl",
		"/dev/nvidia-caps/nvidia-cap1": node + "/dev/nvidia-caps/nvidia-cap1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("view (-want +got):\n%s", diff)
	}
}

// Every container gets its view in imexsim.ContainerPathsEnv: its volume mounts, the files the
// kubelet manages and its CDI devices, in host paths.
func TestContainerSpecSetsTheView(t *testing.T) {
	state := t.TempDir()
	k := &Kubelet{cfg: Config{StateDir: state}}
	n := &node{k: k, spec: NodeSpec{Name: "n1"}, dir: k.NodeDir("n1"), ip: netip.MustParseAddr("127.0.0.1")}
	writeFile(t, filepath.Join(n.dir, "dev/nvidiactl"), "")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c", Image: "cdplane", Command: []string{"cdplane-daemon"},
			VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/nvidia-imex"}},
		}}},
	}
	w := newPodWorker(k, n, pod)
	w.volumes = map[string]string{"config": filepath.Join(w.dir, "volumes/config")}
	c := w.ctrs[0]
	c.edits = applyCDIEdits(n.dir, []*cdispec.ContainerEdits{{DeviceNodes: []*cdispec.DeviceNode{
		{Path: "/dev/nvidiactl", HostPath: "/dev/nvidiactl"},
		{Path: "/dev/nvidia-caps/nvidia-cap1"}, // no host file on the node
	}}})
	inst, err := w.containerSpec(context.Background(), c)
	if err != nil {
		t.Fatalf("containerSpec: %v", err)
	}
	t.Cleanup(func() { _ = inst.log.Close() })
	var view string
	for _, e := range inst.spec.Env {
		if e.Name == imexsim.ContainerPathsEnv {
			view = e.Value
		}
	}
	got, err := imexsim.DecodeContainerPaths(view)
	if err != nil {
		t.Fatalf("decoding %s=%q: %v", imexsim.ContainerPathsEnv, view, err)
	}
	want := map[string]string{
		"/etc/nvidia-imex": filepath.Join(w.dir, "volumes/config"),
		EtcHostsPath:       w.hostsFilePath(),
		EtcResolvConfPath:  w.resolvConfPath(),
		"/dev/nvidiactl":   filepath.Join(n.dir, "dev/nvidiactl"),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("view (-want +got):\n%s", diff)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The simulated IMEX's shutdown delay, set in the kubelet's own environment, reaches every
// container; unset, nothing is added.
func TestSimulatedHostSettings(t *testing.T) {
	set := map[string]string{imexsim.ShutdownDelayEnv: "0", "PATH": "/bin"}
	got := simulatedHostSettings(func(k string) (string, bool) { v, ok := set[k]; return v, ok })
	if diff := cmp.Diff([]EnvVar{{Name: imexsim.ShutdownDelayEnv, Value: "0"}}, got); diff != "" {
		t.Errorf("settings (-want +got):\n%s", diff)
	}
	if got := simulatedHostSettings(func(string) (string, bool) { return "", false }); got != nil {
		t.Errorf("nothing set: %v", got)
	}
}
