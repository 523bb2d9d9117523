package kubeletplugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourcev1 "k8s.io/api/resource/v1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/daemonenv"
)

// driverRootFixture lays out files (relative path: executable) under a new directory.
func driverRootFixture(t *testing.T, files map[string]bool) string {
	t.Helper()
	root := t.TempDir()
	for rel, exec := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if exec {
			mode = 0o755
		}
		if err := os.WriteFile(p, nil, mode); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestDriverRootEdits(t *testing.T) {
	complete := map[string]bool{"usr/bin/nvidia-imex": true, "usr/sbin/nvidia-imex-ctl": true, "usr/lib64/libnvidia-ml.so.1": false}
	ro := []string{"ro", "nosuid", "nodev", "bind"}
	cases := map[string]struct {
		files     map[string]bool
		wantMount []*cdispec.Mount
		wantEnv   daemonenv.Claim
	}{
		"complete": {
			files: complete,
			wantMount: []*cdispec.Mount{
				{HostPath: "/host/driver/usr/bin/nvidia-imex", ContainerPath: "/usr/local/nvidia/bin/nvidia-imex", Options: ro},
				{HostPath: "/host/driver/usr/sbin/nvidia-imex-ctl", ContainerPath: "/usr/local/nvidia/bin/nvidia-imex-ctl", Options: ro},
				{HostPath: "/host/driver/usr/lib64/libnvidia-ml.so.1", ContainerPath: "/usr/local/nvidia/lib/libnvidia-ml.so.1", Options: ro},
			},
			wantEnv: daemonenv.Claim{NoGPUs: true, IMEXBinary: "/usr/local/nvidia/bin/nvidia-imex", IMEXCtlBinary: "/usr/local/nvidia/bin/nvidia-imex-ctl",
				NVMLLibrary: "/usr/local/nvidia/lib/libnvidia-ml.so.1"},
		},
		"no NVML, first directory wins": {
			files: map[string]bool{"usr/bin/nvidia-imex": true, "bin/nvidia-imex": true, "sbin/nvidia-imex-ctl": true},
			wantMount: []*cdispec.Mount{
				{HostPath: "/host/driver/usr/bin/nvidia-imex", ContainerPath: "/usr/local/nvidia/bin/nvidia-imex", Options: ro},
				{HostPath: "/host/driver/sbin/nvidia-imex-ctl", ContainerPath: "/usr/local/nvidia/bin/nvidia-imex-ctl", Options: ro},
			},
			wantEnv: daemonenv.Claim{NoGPUs: true, IMEXBinary: "/usr/local/nvidia/bin/nvidia-imex", IMEXCtlBinary: "/usr/local/nvidia/bin/nvidia-imex-ctl"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := driverRoot{Host: "/host/driver", Container: driverRootFixture(t, tc.files)}
			f, err := r.locate()
			if err != nil {
				t.Fatal(err)
			}
			var env daemonenv.Claim
			mounts := r.edits(f, &env)
			if diff := cmp.Diff(tc.wantMount, mounts); diff != "" {
				t.Errorf("mounts (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantEnv, env); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
	// The host path of the default root "/".
	r := driverRoot{Host: "/", Container: driverRootFixture(t, complete)}
	f, err := r.locate()
	if err != nil {
		t.Fatal(err)
	}
	if m := r.edits(f, &daemonenv.Claim{}); m[0].HostPath != "/usr/bin/nvidia-imex" {
		t.Errorf("host path %s under /, want /usr/bin/nvidia-imex", m[0].HostPath)
	}
}

func TestDriverRootMissing(t *testing.T) {
	cases := map[string]struct {
		files   map[string]bool
		noRoot  bool
		wantErr []string
	}{
		"no root":        {noRoot: true, wantErr: []string{"NVIDIA driver root /host/driver", "no such file"}},
		"no nvidia-imex": {files: map[string]bool{"usr/bin/nvidia-imex-ctl": true}, wantErr: []string{"/host/driver", "no executable nvidia-imex in usr/bin"}},
		"no ctl":         {files: map[string]bool{"usr/bin/nvidia-imex": true}, wantErr: []string{"/host/driver", "no executable nvidia-imex-ctl in"}},
		"neither":        {files: map[string]bool{"usr/lib64/libnvidia-ml.so.1": false}, wantErr: []string{"nvidia-imex or nvidia-imex-ctl"}},
		"not executable": {files: map[string]bool{"usr/bin/nvidia-imex": false, "usr/bin/nvidia-imex-ctl": true}, wantErr: []string{"no executable nvidia-imex in"}},
		"imex is a dir":  {files: map[string]bool{"usr/bin/nvidia-imex/x": true, "usr/bin/nvidia-imex-ctl": true}, wantErr: []string{"no executable nvidia-imex in"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			root := driverRootFixture(t, tc.files)
			if tc.noRoot {
				root = filepath.Join(root, "absent")
			}
			_, err := driverRoot{Host: "/host/driver", Container: root}.locate()
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

// A daemon claim on a node whose driver root lacks IMEX fails before anything is written: no
// checkpoint entry, no CDI spec, no config directory.
func TestPrepareDaemonWithoutDriver(t *testing.T) {
	state, cdiDir := t.TempDir(), t.TempDir()
	cp, err := openCheckpoint(state)
	if err != nil {
		t.Fatal(err)
	}
	w, err := newCDIWriter(cdiDir)
	if err != nil {
		t.Fatal(err)
	}
	root := driverRootFixture(t, map[string]bool{"usr/bin/nvidia-imex": true})
	d := &Driver{opts: Options{StateDir: state, CDIRoot: cdiDir, DriverNamespace: "ns", NvidiaDriverRoot: "/host/driver", ContainerDriverRoot: root}, cp: cp, cdi: w}
	daemonCfg := `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainDaemonConfig","domainID":"` + testUID + `"}`
	claim := device(allocated(), "daemon", DaemonDeviceName).
		AllocatedConfig(resourcev1.AllocationConfigSourceClaim, cdv1beta1.DriverName, daemonCfg, "daemon").Obj()
	_, err = d.prepareClaim(t.Context(), claim, time.Now())
	if err == nil || !strings.Contains(err.Error(), "NVIDIA driver root /host/driver") || !strings.Contains(err.Error(), "nvidia-imex-ctl") {
		t.Fatalf("prepare: %v, want the driver root's missing nvidia-imex-ctl", err)
	}
	if _, ok := cp.get(claim.UID); ok {
		t.Error("checkpoint entry written")
	}
	for _, dir := range []string{cdiDir, state} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), "checkpoint") {
				t.Errorf("%s left in %s", e.Name(), dir)
			}
		}
	}
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
	root := driverRootFixture(t, map[string]bool{"usr/bin/nvidia-imex": true, "usr/bin/nvidia-imex-ctl": true, "usr/lib64/libnvidia-ml.so.570.133.20": false})
	if err := os.Symlink("libnvidia-ml.so.570.133.20", filepath.Join(root, "usr/lib64/libnvidia-ml.so.1")); err != nil {
		t.Fatal(err)
	}
	r := driverRoot{Host: "/host/driver", Container: root}
	f, err := r.locate()
	if err != nil {
		t.Fatal(err)
	}
	kernel := func(v string) []byte {
		return []byte("NVRM version: NVIDIA UNIX x86_64 Kernel Module  " + v + "  Fri Mar 14 03:09:53 UTC 2025\n")
	}
	if err := r.checkVersion(f, kernel("570.133.20")); err != nil {
		t.Errorf("matching versions: %v", err)
	}
	err = r.checkVersion(f, kernel("575.51.03"))
	want := "NVIDIA driver root /host/driver holds driver 570.133.20 (/host/driver/usr/lib64/libnvidia-ml.so.1), but the loaded kernel driver is 575.51.03 (/proc/driver/nvidia/version)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("mismatch: %v, want an error containing %q", err, want)
	}
	if err := r.checkVersion(f, nil); err != nil {
		t.Errorf("no kernel version file: %v, want nothing to compare", err)
	}
	if err := r.checkVersion(driverFiles{IMEX: f.IMEX, IMEXCtl: f.IMEXCtl}, kernel("575.51.03")); err != nil {
		t.Errorf("no NVML library: %v, want nothing to compare", err)
	}
}
