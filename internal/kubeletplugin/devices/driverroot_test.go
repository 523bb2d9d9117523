package devices

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"cdplane/internal/daemonenv"
	"cdplane/internal/driverroot"
	"cdplane/internal/testutil"
)

// completeRoot is a driver root with everything a daemon container needs: libnvidia-ml.so.1 a
// link to the versioned library, as the driver installs it, and the control device.
var completeRoot = map[string]bool{
	"usr/bin/nvidia-imex": true, "usr/sbin/nvidia-imex-ctl": true,
	"usr/lib64/libnvidia-ml.so.580.82.07": false, "dev/nvidiactl": false,
}

func linkNVML(t *testing.T, root string) {
	t.Helper()
	if err := os.Symlink("libnvidia-ml.so.580.82.07", filepath.Join(root, "usr/lib64/libnvidia-ml.so.1")); err != nil {
		t.Fatal(err)
	}
}

func TestDriverRootEdits(t *testing.T) {
	ro := []string{"ro", "nosuid", "nodev", "bind"}
	files := func(drop string, add ...string) map[string]bool {
		m := map[string]bool{}
		for k, v := range completeRoot {
			if k != drop {
				m[k] = v
			}
		}
		for _, a := range add {
			m[a] = true
		}
		return m
	}
	wantEnv := daemonenv.Claim{NoGPUs: true, IMEXBinary: "/usr/local/nvidia/bin/nvidia-imex", IMEXCtlBinary: "/usr/local/nvidia/bin/nvidia-imex-ctl",
		NVMLLibrary: "/usr/local/nvidia/lib/libnvidia-ml.so.1", LibraryPath: "/usr/local/nvidia/lib"}
	cases := map[string]struct {
		files       map[string]bool
		hostDev     bool
		wantMount   []*cdispec.Mount
		wantDevices []*cdispec.DeviceNode
	}{
		"complete": {
			files: completeRoot,
			wantMount: []*cdispec.Mount{
				{HostPath: "/host/driver/usr/bin/nvidia-imex", ContainerPath: "/usr/local/nvidia/bin/nvidia-imex", Options: ro},
				{HostPath: "/host/driver/usr/sbin/nvidia-imex-ctl", ContainerPath: "/usr/local/nvidia/bin/nvidia-imex-ctl", Options: ro},
				// The versioned file itself: the runtime must not follow the root's link on the host.
				{HostPath: "/host/driver/usr/lib64/libnvidia-ml.so.580.82.07", ContainerPath: "/usr/local/nvidia/lib/libnvidia-ml.so.1", Options: ro},
			},
			wantDevices: []*cdispec.DeviceNode{{Path: "/dev/nvidiactl", HostPath: "/host/driver/dev/nvidiactl"}},
		},
		"control device of the host, first directory wins": {
			files:   files("dev/nvidiactl", "bin/nvidia-imex"),
			hostDev: true,
			wantMount: []*cdispec.Mount{
				{HostPath: "/host/driver/usr/bin/nvidia-imex", ContainerPath: "/usr/local/nvidia/bin/nvidia-imex", Options: ro},
				{HostPath: "/host/driver/usr/sbin/nvidia-imex-ctl", ContainerPath: "/usr/local/nvidia/bin/nvidia-imex-ctl", Options: ro},
				{HostPath: "/host/driver/usr/lib64/libnvidia-ml.so.580.82.07", ContainerPath: "/usr/local/nvidia/lib/libnvidia-ml.so.1", Options: ro},
			},
			wantDevices: []*cdispec.DeviceNode{{Path: "/dev/nvidiactl", HostPath: "/dev/nvidiactl"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			root := testutil.DriverRootFixture(t, tc.files)
			linkNVML(t, root)
			r := DriverRoot{Root: driverroot.Root{Host: "/host/driver", Container: root}}
			if tc.hostDev {
				r.Dev = testutil.DriverRootFixture(t, map[string]bool{"nvidiactl": false})
			}
			f, err := r.Locate()
			if err != nil {
				t.Fatal(err)
			}
			var env daemonenv.Claim
			mounts, devices := r.Edits(f, &env)
			if diff := cmp.Diff(tc.wantMount, mounts); diff != "" {
				t.Errorf("mounts (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantDevices, devices); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantEnv, env); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
	// The host path of the default root "/".
	root := testutil.DriverRootFixture(t, completeRoot)
	linkNVML(t, root)
	r := DriverRoot{Root: driverroot.Root{Host: "/", Container: root}}
	f, err := r.Locate()
	if err != nil {
		t.Fatal(err)
	}
	if m, d := r.Edits(f, &daemonenv.Claim{}); m[0].HostPath != "/usr/bin/nvidia-imex" || d[0].HostPath != "/dev/nvidiactl" {
		t.Errorf("host paths %s, %s under /, want /usr/bin/nvidia-imex, /dev/nvidiactl", m[0].HostPath, d[0].HostPath)
	}
}

func TestDriverRootMissing(t *testing.T) {
	without := func(drop ...string) map[string]bool {
		m := map[string]bool{}
		for k, v := range completeRoot {
			if !slices.Contains(drop, k) {
				m[k] = v
			}
		}
		return m
	}
	cases := map[string]struct {
		files   map[string]bool
		noRoot  bool
		wantErr []string
	}{
		"no root":        {noRoot: true, wantErr: []string{"NVIDIA driver root /host/driver", "no such file"}},
		"no nvidia-imex": {files: without("usr/bin/nvidia-imex"), wantErr: []string{"/host/driver", "has no executable nvidia-imex: tried", "/usr/bin/nvidia-imex,", "/opt/bin/nvidia-imex"}},
		"no ctl":         {files: without("usr/sbin/nvidia-imex-ctl"), wantErr: []string{"/host/driver", "has no executable nvidia-imex-ctl: tried"}},
		"not executable": {files: mergeFiles(without("usr/bin/nvidia-imex"), map[string]bool{"usr/bin/nvidia-imex": false}), wantErr: []string{"no executable nvidia-imex: tried"}},
		"imex is a dir":  {files: mergeFiles(without("usr/bin/nvidia-imex"), map[string]bool{"usr/bin/nvidia-imex/x": true}), wantErr: []string{"no executable nvidia-imex: tried"}},
		"no NVML":        {files: without("usr/lib64/libnvidia-ml.so.580.82.07"), wantErr: []string{"has no libnvidia-ml.so.1: tried", "/usr/lib64/libnvidia-ml.so.1", "/usr/lib/libnvidia-ml.so.1"}},
		"no nvidiactl":   {files: without("dev/nvidiactl"), wantErr: []string{"no NVIDIA control device /dev/nvidiactl", "/dev/nvidiactl", "is the NVIDIA kernel driver loaded?"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			root := testutil.DriverRootFixture(t, tc.files)
			if tc.noRoot {
				root = filepath.Join(root, "absent")
			} else if _, ok := tc.files["usr/lib64/libnvidia-ml.so.580.82.07"]; ok {
				linkNVML(t, root)
			}
			_, err := DriverRoot{Root: driverroot.Root{Host: "/host/driver", Container: root}}.Locate()
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func mergeFiles(a, b map[string]bool) map[string]bool {
	out := map[string]bool{}
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}

func TestKernelDriverVersion(t *testing.T) {
	for name, tc := range map[string]struct{ file, want string }{
		"proprietary": {file: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.133.20  Fri Mar 14 03:09:53 UTC 2025\nGCC version:  gcc version 12.2.0\n", want: "570.133.20"},
		"open":        {file: "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.65.06  Release Build  (dvs-builder@U16-I3-B03-4-3)\n", want: "580.65.06"},
		"two fields":  {file: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  565.57  Sat Oct\n", want: "565.57"},
		"no NVRM":     {file: "GCC version: 12.2.0\n"},
		"empty":       {},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := KernelDriverVersion([]byte(tc.file))
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("KernelDriverVersion = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
}

// The driver root must hold the loaded driver: its NVML library's version (the name the
// driver's libnvidia-ml.so.1 links to) against the kernel module's.
func TestDriverRootVersionCheck(t *testing.T) {
	root := testutil.DriverRootFixture(t, map[string]bool{"usr/bin/nvidia-imex": true, "usr/bin/nvidia-imex-ctl": true, "usr/lib64/libnvidia-ml.so.570.133.20": false, "dev/nvidiactl": false})
	if err := os.Symlink("libnvidia-ml.so.570.133.20", filepath.Join(root, "usr/lib64/libnvidia-ml.so.1")); err != nil {
		t.Fatal(err)
	}
	r := DriverRoot{Root: driverroot.Root{Host: "/host/driver", Container: root}}
	f, err := r.Locate()
	if err != nil {
		t.Fatal(err)
	}
	kernel := func(v string) []byte {
		return []byte("NVRM version: NVIDIA UNIX x86_64 Kernel Module  " + v + "  Fri Mar 14 03:09:53 UTC 2025\n")
	}
	if err := r.CheckVersion(f, kernel("570.133.20")); err != nil {
		t.Errorf("matching versions: %v", err)
	}
	err = r.CheckVersion(f, kernel("575.51.03"))
	want := "NVIDIA driver root /host/driver holds driver 570.133.20 (/host/driver/usr/lib64/libnvidia-ml.so.570.133.20), but the loaded kernel driver is 575.51.03 (/proc/driver/nvidia/version)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("mismatch: %v, want an error containing %q", err, want)
	}
	if err := r.CheckVersion(f, nil); err != nil {
		t.Errorf("no kernel version file: %v, want nothing to compare", err)
	}
	if err := r.CheckVersion(DriverFiles{IMEX: f.IMEX, IMEXCtl: f.IMEXCtl}, kernel("575.51.03")); err != nil {
		t.Errorf("no NVML library: %v, want nothing to compare", err)
	}
}

// A daemon whose IMEX cannot get the node's session names an enabled host service when the
// driver root has one.
func TestHostIMEXService(t *testing.T) {
	r := DriverRoot{Root: driverroot.Root{Host: "/", Container: testutil.DriverRootFixture(t, completeRoot)}}
	if got := r.HostIMEXService(); got != "" {
		t.Errorf("no unit: %q", got)
	}
	unit := filepath.Join(r.Container, "etc/systemd/system/multi-user.target.wants/nvidia-imex.service")
	if err := os.MkdirAll(filepath.Dir(unit), 0o755); err != nil {
		t.Fatal(err)
	}
	// A dangling link is still an enabled unit: its target lies in the host's /usr/lib.
	if err := os.Symlink("/usr/lib/systemd/system/nvidia-imex.service", unit); err != nil {
		t.Fatal(err)
	}
	if got, want := r.HostIMEXService(), "/etc/systemd/system/multi-user.target.wants/nvidia-imex.service"; got != want {
		t.Errorf("hostIMEXService = %q, want %q", got, want)
	}
}
