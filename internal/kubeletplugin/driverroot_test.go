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
