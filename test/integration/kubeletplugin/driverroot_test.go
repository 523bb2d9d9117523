package kubeletplugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/driverroot"
	"cdplane/internal/kubeletplugin"
)

// driverRoot lays out files (paths relative to the root) as executables under a new directory.

// nvmlPath is where a Debian driver install on this machine's architecture puts NVML.
var nvmlPath = "usr/lib/" + driverroot.LibTriplet() + "/libnvidia-ml.so.1"

func driverRoot(t *testing.T, files ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, rel := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestDaemonClaimDriverRoot prepares daemon claims on nodes whose driver root (seen by the
// plugin at a mount point, at /host/driver on the host) is complete or lacks nvidia-imex-ctl:
// the daemon container gets the driver's files read-only at fixed paths named in its
// environment, or the prepare fails naming the root and what is missing, leaving nothing.
func TestDaemonClaimDriverRoot(t *testing.T) {
	t.Parallel()
	const hostRoot = "/host/driver"
	ro := []string{"ro", "nosuid", "nodev", "bind"}
	t.Run("complete", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		n := e.addNode(11)
		root := driverRoot(t, "usr/bin/nvidia-imex", "usr/bin/nvidia-imex-ctl", nvmlPath, "dev/nvidiactl")
		// The loaded driver's version reaches the daemon.
		versionFile := n.path("proc", "driver", "nvidia", "version")
		must(t, os.MkdirAll(filepath.Dir(versionFile), 0o755))
		must(t, os.WriteFile(versionFile, []byte("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.172.08  Fri May 30 2025\n"), 0o644))
		n.startWith(4, testr.NewWithOptions(t, testr.Options{Verbosity: 1}), func(o *kubeletplugin.Options) {
			o.NvidiaDriverRoot, o.ContainerDriverRoot = hostRoot, root
		})
		cd := e.createCD(e.ns, "daemon")
		claim := e.allocatedClaim(e.driverNS, "daemon", n, kubeletplugin.DaemonDeviceName, rawJSON(t, cdv1beta1.NewDaemonConfig(string(cd.UID))), nil)
		n.mustPrepare(claim)
		spec, ok := n.cdiSpec(claim.UID)
		if !ok {
			t.Fatal("no CDI spec")
		}
		edits := spec.Devices[0].ContainerEdits
		wantMounts := []*cdispec.Mount{
			{HostPath: n.path("state", "domains", string(cd.UID)), ContainerPath: "/etc/nvidia-imex", Options: []string{"rw", "nosuid", "nodev", "bind"}},
			{HostPath: hostRoot + "/usr/bin/nvidia-imex", ContainerPath: "/usr/local/nvidia/bin/nvidia-imex", Options: ro},
			{HostPath: hostRoot + "/usr/bin/nvidia-imex-ctl", ContainerPath: "/usr/local/nvidia/bin/nvidia-imex-ctl", Options: ro},
			{HostPath: hostRoot + "/" + nvmlPath, ContainerPath: "/usr/local/nvidia/lib/libnvidia-ml.so.1", Options: ro},
		}
		if diff := cmp.Diff(wantMounts, edits.Mounts); diff != "" {
			t.Errorf("daemon mounts (-want +got):\n%s", diff)
		}
		wantEnv := []string{
			"CLIQUE_ID=" + n.clique, "COMPUTE_DOMAIN_UUID=" + string(cd.UID), "COMPUTE_DOMAIN_NAME=" + cd.Name,
			"COMPUTE_DOMAIN_NAMESPACE=" + cd.Namespace, "IMEX_CONFIG_DIR=/etc/nvidia-imex", "NVIDIA_VISIBLE_DEVICES=void",
			"IMEX_BINARY=/usr/local/nvidia/bin/nvidia-imex", "IMEX_CTL_BINARY=/usr/local/nvidia/bin/nvidia-imex-ctl",
			"NVML_LIBRARY=/usr/local/nvidia/lib/libnvidia-ml.so.1", "LD_LIBRARY_PATH=/usr/local/nvidia/lib", "NVIDIA_KERNEL_DRIVER_VERSION=570.172.08",
		}
		if diff := cmp.Diff(wantEnv, edits.Env); diff != "" {
			t.Errorf("daemon env (-want +got):\n%s", diff)
		}
		// The driver's control device, from the host; the management device after it.
		if len(edits.DeviceNodes) == 0 || edits.DeviceNodes[0].Path != "/dev/nvidiactl" || edits.DeviceNodes[0].HostPath != hostRoot+"/dev/nvidiactl" {
			t.Errorf("daemon device nodes %+v, want /dev/nvidiactl from %s/dev/nvidiactl first", edits.DeviceNodes, hostRoot)
		}
	})
	t.Run("no nvidia-imex-ctl", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		n := e.addNode(12)
		root := driverRoot(t, "usr/bin/nvidia-imex")
		n.startWith(4, testr.NewWithOptions(t, testr.Options{Verbosity: 1}), func(o *kubeletplugin.Options) {
			o.NvidiaDriverRoot, o.ContainerDriverRoot = hostRoot, root
			o.PodName = "plugin-" + n.name
		})
		// Said at start, before any claim fails.
		waitNodeEvent(e, n, kubeletplugin.ReasonDriverRootIncomplete, "daemon claims on node "+n.name+" will fail: NVIDIA driver root "+hostRoot)
		cd := e.createCD(e.ns, "daemon")
		claim := e.allocatedClaim(e.driverNS, "daemon", n, kubeletplugin.DaemonDeviceName, rawJSON(t, cdv1beta1.NewDaemonConfig(string(cd.UID))), nil)
		got, _ := n.prepare(claim)
		for _, want := range []string{"NVIDIA driver root " + hostRoot, "no executable nvidia-imex-ctl"} {
			if !strings.Contains(got.Error, want) {
				t.Errorf("prepare error %q lacks %q", got.Error, want)
			}
		}
		if _, ok := n.cdiSpec(claim.UID); ok {
			t.Error("a CDI spec was written")
		}
		if e, ok := n.checkpoint().Claims[claim.UID]; ok {
			t.Errorf("checkpoint entry %+v written", e)
		}
		if _, err := os.Stat(n.path("state", "domains", string(cd.UID))); !os.IsNotExist(err) {
			t.Errorf("domain config directory: %v, want none", err)
		}
	})
	t.Run("a driver too old for IMEX names", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		n := e.addNode(14)
		root := driverRoot(t, "usr/bin/nvidia-imex", "usr/bin/nvidia-imex-ctl", nvmlPath, "dev/nvidiactl")
		versionFile := n.path("proc", "driver", "nvidia", "version")
		must(t, os.MkdirAll(filepath.Dir(versionFile), 0o755))
		must(t, os.WriteFile(versionFile, []byte("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.148.08  Fri May 30 2025\n"), 0o644))
		n.startWith(4, testr.NewWithOptions(t, testr.Options{Verbosity: 1}), func(o *kubeletplugin.Options) {
			o.NvidiaDriverRoot, o.ContainerDriverRoot = hostRoot, root
			o.PodName = "plugin-" + n.name
		})
		// Said at start, and every daemon claim refused naming both versions, as NVIDIA's
		// driver refuses the IMEXDaemonsWithDNSNames gate on such a node.
		waitNodeEvent(e, n, kubeletplugin.ReasonDriverTooOld, "node "+n.name+" runs 570.148.08")
		cd := e.createCD(e.ns, "daemon")
		claim := e.allocatedClaim(e.driverNS, "daemon", n, kubeletplugin.DaemonDeviceName, rawJSON(t, cdv1beta1.NewDaemonConfig(string(cd.UID))), nil)
		got, _ := n.prepare(claim)
		if want := "needs NVIDIA driver 570.158.01 or later (IMEX takes host names in its node list from that version), but node " + n.name + " runs 570.148.08"; !strings.Contains(got.Error, want) {
			t.Errorf("prepare error %q lacks %q", got.Error, want)
		}
		if _, ok := n.cdiSpec(claim.UID); ok {
			t.Error("a CDI spec was written")
		}
	})
	t.Run("another driver than the loaded one", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		n := e.addNode(13)
		root := driverRoot(t, "usr/bin/nvidia-imex", "usr/bin/nvidia-imex-ctl", "usr/lib64/libnvidia-ml.so.570.133.20", "dev/nvidiactl")
		must(t, os.Symlink("libnvidia-ml.so.570.133.20", filepath.Join(root, "usr/lib64/libnvidia-ml.so.1")))
		versionFile := n.path("proc", "driver", "nvidia", "version")
		must(t, os.MkdirAll(filepath.Dir(versionFile), 0o755))
		must(t, os.WriteFile(versionFile, []byte("NVRM version: NVIDIA UNIX x86_64 Kernel Module  575.51.03  Fri May 30 2025\n"), 0o644))
		n.startWith(4, testr.NewWithOptions(t, testr.Options{Verbosity: 1}), func(o *kubeletplugin.Options) {
			o.NvidiaDriverRoot, o.ContainerDriverRoot = hostRoot, root
			o.PodName = "plugin-" + n.name
		})
		waitNodeEvent(e, n, kubeletplugin.ReasonDriverRootMismatch, "holds driver 570.133.20")
		cd := e.createCD(e.ns, "daemon")
		claim := e.allocatedClaim(e.driverNS, "daemon", n, kubeletplugin.DaemonDeviceName, rawJSON(t, cdv1beta1.NewDaemonConfig(string(cd.UID))), nil)
		got, _ := n.prepare(claim)
		if want := "holds driver 570.133.20 (" + hostRoot + "/usr/lib64/libnvidia-ml.so.570.133.20), but the loaded kernel driver is 575.51.03"; !strings.Contains(got.Error, want) {
			t.Errorf("prepare error %q lacks %q", got.Error, want)
		}
		if _, ok := n.cdiSpec(claim.UID); ok {
			t.Error("a CDI spec was written")
		}
		if e, ok := n.checkpoint().Claims[claim.UID]; ok {
			t.Errorf("checkpoint entry %+v written", e)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
