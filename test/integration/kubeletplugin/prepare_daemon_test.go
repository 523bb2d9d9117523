package kubeletplugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/sim/nvmlsim"
)

// TestDaemonClaim prepares daemon claims on a node with a clique and on one without fabric, and
// checks the CDI edits the daemon container gets and the config directory behind them.
func TestDaemonClaim(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		opts       []nodeOption
		wantMgmt   bool
		wantClique func(n *node) string
	}{
		"clique":    {wantMgmt: true, wantClique: func(n *node) string { return n.clique }},
		"no fabric": {opts: []nodeOption{noFabric()}, wantClique: func(*node) string { return "" }},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			n := e.addNode(7, tc.opts...)
			n.start(4)
			cd := e.createCD(e.ns, "daemon")
			claim := e.allocatedClaim(e.driverNS, "daemon", n, kubeletplugin.DaemonDeviceName,
				rawJSON(t, cdv1beta1.NewDaemonConfig(string(cd.UID))), nil)
			got := n.mustPrepare(claim)
			if len(got.Devices) != 1 || got.Devices[0].DeviceName != kubeletplugin.DaemonDeviceName || len(got.Devices[0].CdiDeviceIds) != 1 {
				t.Fatalf("prepare answered %v, want daemon-0 with one CDI device", got.Devices)
			}
			spec, ok := n.cdiSpec(claim.UID)
			if !ok || len(spec.Devices) != 1 {
				t.Fatalf("daemon CDI spec: %+v", spec)
			}
			edits := spec.Devices[0].ContainerEdits
			wantEnv := []string{
				"CLIQUE_ID=" + tc.wantClique(n),
				"COMPUTE_DOMAIN_UUID=" + string(cd.UID),
				"COMPUTE_DOMAIN_NAME=" + cd.Name,
				"COMPUTE_DOMAIN_NAMESPACE=" + cd.Namespace,
				// Where the plugin mounted the config directory; nothing says the node is
				// simulated (the plugin does not know).
				"IMEX_CONFIG_DIR=/etc/nvidia-imex",
				// The loaded driver's version, from the node's /proc/driver/nvidia/version.
				"NVIDIA_KERNEL_DRIVER_VERSION=" + nvmlsim.DefaultDriverVersion,
			}
			if diff := cmp.Diff(wantEnv, edits.Env); diff != "" {
				t.Errorf("daemon env (-want +got):\n%s", diff)
			}
			dir := n.path("state", "domains", string(cd.UID))
			if len(edits.Mounts) != 1 || edits.Mounts[0].HostPath != dir || edits.Mounts[0].ContainerPath != "/etc/nvidia-imex" {
				t.Errorf("daemon mounts %+v, want %s at /etc/nvidia-imex", edits.Mounts, dir)
			}
			if fi, err := os.Stat(dir); err != nil {
				t.Errorf("the domain's config directory: %v", err)
			} else if fi.Mode().Perm() != 0o700 {
				t.Errorf("the domain's config directory has mode %v, want 0700 (the daemon's own)", fi.Mode().Perm())
			}
			tmpl, err := os.ReadFile(filepath.Join(dir, kubeletplugin.IMEXConfigTemplateFile))
			if err != nil {
				t.Fatalf("IMEX config template: %v", err)
			}
			for _, line := range []string{"BIND_INTERFACE_IP={{POD_IP}}", "IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes.cfg"} {
				if !strings.Contains(string(tmpl), line+"\n") {
					t.Errorf("IMEX config template lacks %q:\n%s", line, tmpl)
				}
			}
			if tc.wantMgmt {
				if len(edits.DeviceNodes) != 1 || !strings.HasPrefix(edits.DeviceNodes[0].Path, "/dev/nvidia-caps/nvidia-cap") {
					t.Errorf("daemon device nodes %+v, want the IMEX management device", edits.DeviceNodes)
				}
			} else if len(edits.DeviceNodes) != 0 {
				t.Errorf("daemon on a node without fabric gets device nodes %+v", edits.DeviceNodes)
			}

			// Unprepare removes the spec and keeps the domain's config directory: a replacement
			// daemon pod's prepare may already have written into it. It goes with the domain.
			if msg := n.unprepare(claim.Namespace, claim.Name, claim.UID); msg != "" {
				t.Fatalf("unprepare: %s", msg)
			}
			if _, ok := n.cdiSpec(claim.UID); ok {
				t.Error("CDI spec left after unprepare")
			}
			if _, err := os.Stat(filepath.Join(dir, kubeletplugin.IMEXConfigTemplateFile)); err != nil {
				t.Errorf("the domain's config directory after unprepare: %v, want it kept while the domain exists", err)
			}
			if err := e.C.Delete(e.Ctx(), cd); err != nil {
				t.Fatal(err)
			}
			e.Eventually(time.Minute, "the deleted domain's config directory removed", func() (bool, error) {
				_, err := os.Stat(dir)
				return os.IsNotExist(err), nil
			})
		})
	}
}

// TestDaemonClaimOutsideDriverNamespace: the IMEX management device is for the plane's daemons
// only; a daemon claim in a workload namespace is refused permanently.
func TestDaemonClaimOutsideDriverNamespace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.addNode(8)
	n.start(4)
	cd := e.createCD(e.ns, "sneaky")
	claim := e.allocatedClaim(e.ns, "daemon", n, kubeletplugin.DaemonDeviceName, rawJSON(t, cdv1beta1.NewDaemonConfig(string(cd.UID))), nil)
	got, _ := n.prepare(claim)
	if !strings.Contains(got.Error, "permanent error") || !strings.Contains(got.Error, "not in the driver namespace") {
		t.Errorf("prepare error %q, want a permanent error about the driver namespace", got.Error)
	}
}

// TestOneDevicePreparedForOneClaim: a second claim allocated the node's daemon device while the
// checkpoint still holds it for a first (a stale entry, admin access, an unprepare racing the
// next allocation) is not prepared: the error names both claims and is retried, nothing is
// written for it, and once the first claim is unprepared the second is prepared.
func TestOneDevicePreparedForOneClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.addNode(8)
	n.start(4)
	cd := e.createCD(e.ns, "shared")
	cfg := rawJSON(t, cdv1beta1.NewDaemonConfig(string(cd.UID)))
	first := e.allocatedClaim(e.driverNS, "first", n, kubeletplugin.DaemonDeviceName, cfg, nil)
	second := e.allocatedClaim(e.driverNS, "second", n, kubeletplugin.DaemonDeviceName, cfg, nil)
	n.mustPrepare(first)
	got, _ := n.prepare(second)
	for _, want := range []string{"retryable", "device " + n.name + "/" + kubeletplugin.DaemonDeviceName + " is prepared for claim " + e.driverNS + "/first", string(second.UID)} {
		if !strings.Contains(got.Error, want) {
			t.Fatalf("preparing a second claim of the same device: %q, want it to name %q", got.Error, want)
		}
	}
	if _, ok := n.cdiSpec(second.UID); ok {
		t.Error("a CDI spec was written for the refused claim")
	}
	if msg := n.unprepare(first.Namespace, first.Name, first.UID); msg != "" {
		t.Fatalf("unprepare: %s", msg)
	}
	n.mustPrepare(second)
}
