package kubeletplugin

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-base/featuregate"

	resourcev1 "k8s.io/api/resource/v1"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/features"
	"cdplane/internal/kubeletplugin"
)

// hostIMEXRoot is a driver root whose nvidia-imex-ctl answers READY while the file "ready"
// exists in it and NOT READY otherwise, with the host daemon's command socket at /s.sock. The
// stand-in is a static C program: the plugin runs nvidia-imex-ctl chrooted into the driver root
// (where it can), where no shell or C library of this machine's is. It finds "ready" beside the
// socket it is given (/s.sock chrooted, <root>/s.sock in place).
func hostIMEXRoot(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp("", "him") // short: Unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	ctl := filepath.Join(root, "usr/bin/nvidia-imex-ctl")
	if err := os.MkdirAll(filepath.Dir(ctl), 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "ctl.c")
	prog := `#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
	char ready[4096] = "";
	for (int i = 1; i < argc; i++) {
		if (strncmp(argv[i], "--u=", 4) == 0) {
			snprintf(ready, sizeof ready, "%s", argv[i] + 4);
			char *slash = strrchr(ready, '/');
			if (slash) strcpy(slash + 1, "ready");
		}
	}
	puts(ready[0] && access(ready, F_OK) == 0 ? "READY" : "NOT READY");
	return 0;
}
`
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cc", "-static", "-o", ctl, src).CombinedOutput(); err != nil {
		t.Fatalf("building the static nvidia-imex-ctl stand-in (cc -static, libc6-dev): %v\n%s", err, out)
	}
	l, err := net.Listen("unix", filepath.Join(root, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return root
}

// TestHostManagedIMEX runs a plugin in host-managed mode: it publishes channels but no daemon
// device, refuses daemon claims permanently (nothing recorded), and prepares a channel claim
// only while the host daemon answers READY — a retryable error naming the socket before.
func TestHostManagedIMEX(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.addNode(21)
	root := hostIMEXRoot(t)
	n.startWith(4, testr.NewWithOptions(t, testr.Options{Verbosity: 1}), func(o *kubeletplugin.Options) {
		o.NvidiaDriverRoot, o.ContainerDriverRoot = "/host/driver", root
		o.IMEXMode, o.HostIMEXSocketPath = features.IMEXHostManaged, "/s.sock"
		o.Gates = features.NewGatesForTest(t, map[featuregate.Feature]bool{features.HostManagedIMEXDaemon: true})
		o.PodName = "plugin-" + n.name
	})
	// Not READY at start: said in the log and an event before any claim comes.
	waitNodeEvent(e, n, kubeletplugin.ReasonHostIMEXNotReady, `the host nvidia-imex (socket /host/driver/s.sock) is not ready: "NOT READY"`)

	e.Eventually(time.Minute, "the node's channels published without a daemon device", func() (bool, error) {
		list := &resourcev1.ResourceSliceList{}
		if err := e.C.List(e.Ctx(), list); err != nil {
			return false, err
		}
		names := sets.New[string]()
		for _, s := range list.Items {
			if s.Spec.Driver == cdv1beta1.DriverName && s.Spec.NodeName != nil && *s.Spec.NodeName == n.name {
				for _, d := range s.Spec.Devices {
					names.Insert(d.Name)
				}
			}
		}
		return names.Equal(sets.New("channel-0", "channel-1", "channel-2", "channel-3")), nil
	})

	cd := e.createCD(e.ns, "host")
	daemon := e.allocatedClaim(e.driverNS, "daemon", n, kubeletplugin.DaemonDeviceName, rawJSON(t, cdv1beta1.NewDaemonConfig(string(cd.UID))), nil)
	got, _ := n.prepare(daemon)
	if !strings.Contains(got.Error, "permanent error") || !strings.Contains(got.Error, "runs IMEX as a host service") {
		t.Errorf("daemon claim prepare: %q, want a permanent refusal naming host-managed IMEX", got.Error)
	}
	if entry, ok := n.checkpoint().Claims[daemon.UID]; ok {
		t.Errorf("checkpoint entry %+v for a refused daemon claim", entry)
	}

	channel := e.channelClaim(e.ns, "channel", n, cd, cdv1beta1.AllocationModeSingle)
	got, _ = n.prepare(channel)
	for _, want := range []string{`the host nvidia-imex (socket /host/driver/s.sock) is not ready: "NOT READY"`} {
		if !strings.Contains(got.Error, want) || strings.Contains(got.Error, "permanent error") {
			t.Errorf("channel prepare before the host daemon is ready: %q, want a retryable error containing %q", got.Error, want)
		}
	}
	if _, ok := n.cdiSpec(channel.UID); ok {
		t.Error("a CDI spec was written before the host daemon was ready")
	}

	if err := os.WriteFile(filepath.Join(root, "ready"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	resp := n.mustPrepare(channel)
	if len(resp.Devices) != 1 || resp.Devices[0].DeviceName != "channel-0" {
		t.Fatalf("channel prepare answered %v, want channel-0", resp.Devices)
	}
	spec, ok := n.cdiSpec(channel.UID)
	if !ok || !containsString(deviceNodePaths(spec.Devices[0]), "/dev/nvidia-caps-imex-channels/channel0") {
		t.Fatalf("CDI spec %v does not inject channel 0", spec)
	}
	if l := n.label(); l != string(cd.UID) {
		t.Errorf("node labelled %q, want the domain's UID (a node serves one domain at a time in every mode)", l)
	}
}
