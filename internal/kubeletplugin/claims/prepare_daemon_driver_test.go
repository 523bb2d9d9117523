package claims

import (
	"os"
	"strings"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin/cdi"
	"cdplane/internal/kubeletplugin/checkpoint"
	"cdplane/internal/kubeletplugin/devices"
	"cdplane/internal/testutil"
)

// A daemon claim on a node whose driver root lacks IMEX fails before anything is written: no
// checkpoint entry, no CDI spec, no config directory.
func TestPrepareDaemonWithoutDriver(t *testing.T) {
	state, cdiDir := t.TempDir(), t.TempDir()
	cp, err := checkpoint.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	w, err := cdi.NewWriter(cdiDir)
	if err != nil {
		t.Fatal(err)
	}
	root := testutil.DriverRootFixture(t, map[string]bool{"usr/bin/nvidia-imex": true})
	s := New(Config{StateDir: state, CDIRoot: cdiDir, DriverNamespace: "ns", NvidiaDriverRoot: "/host/driver", ContainerDriverRoot: root}, Deps{Checkpoint: cp, Specs: w})
	daemonCfg := `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainDaemonConfig","domainID":"` + testUID + `"}`
	claim := device(allocated(), "daemon", devices.DaemonDeviceName).
		AllocatedConfig(resourcev1.AllocationConfigSourceClaim, cdv1beta1.DriverName, daemonCfg, "daemon").Obj()
	_, err = s.prepareClaim(t.Context(), claim, time.Now())
	if err == nil || !strings.Contains(err.Error(), "NVIDIA driver root /host/driver") || !strings.Contains(err.Error(), "nvidia-imex-ctl") {
		t.Fatalf("prepare: %v, want the driver root's missing nvidia-imex-ctl", err)
	}
	if _, ok := cp.Get(claim.UID); ok {
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
