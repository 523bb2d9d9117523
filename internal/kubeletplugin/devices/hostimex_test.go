package devices

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cdplane/internal/driverroot"
	"cdplane/internal/testutil"
)

func TestHostIMEXCheck(t *testing.T) {
	cases := map[string]struct {
		answer  string
		code    int
		listen  bool
		noCtl   bool
		socket  string
		wantErr string
	}{
		"ready":          {answer: "READY", listen: true},
		"not ready":      {answer: "NOT READY", listen: true, wantErr: `the host nvidia-imex (socket /host/s.sock) is not ready: "NOT READY"`},
		"query fails":    {answer: "connection refused", code: 1, listen: true, wantErr: "exit status 1: connection refused"},
		"no socket":      {answer: "READY", wantErr: "no command socket at /host/s.sock: is nvidia-imex running as a host service with IMEX_CMD_ENABLED=1 and IMEX_CMD_UNIX_DOMAIN_PATH=/s.sock?"},
		"not a socket":   {answer: "READY", socket: "/args", wantErr: "/host/args is not a socket"},
		"no imex-ctl":    {listen: true, noCtl: true, wantErr: "NVIDIA driver root /host (read at ROOT) has no executable nvidia-imex-ctl: tried"},
		"no driver root": {socket: "/missing-root", wantErr: "NVIDIA driver root /host (read at ROOT/missing)"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			root, argsFile := testutil.HostIMEXFixture(t, tc.answer, tc.code, tc.listen)
			if tc.socket == "/args" {
				if err := os.WriteFile(argsFile, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.noCtl {
				if err := os.Remove(filepath.Join(root, "usr/bin/nvidia-imex-ctl")); err != nil {
					t.Fatal(err)
				}
			}
			h := HostIMEX{Root: DriverRoot{Root: driverroot.Root{Host: "/host", Container: root}}, Socket: "/s.sock", noChroot: true}
			if tc.socket != "" {
				h.Socket = tc.socket
			}
			if tc.socket == "/missing-root" {
				h.Root.Container = filepath.Join(root, "missing")
			}
			err := h.Check(context.Background())
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("check: %v", err)
				}
				args, _ := os.ReadFile(argsFile)
				if want := "-q --u=" + filepath.Join(root, "s.sock") + "\n"; string(args) != want {
					t.Errorf("nvidia-imex-ctl got %q, want %q", args, want)
				}
				return
			}
			want := strings.ReplaceAll(tc.wantErr, "ROOT", root)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("check: %v, want an error containing %q", err, want)
			}
			if !strings.HasPrefix(err.Error(), "host-managed IMEX: ") {
				t.Errorf("error %q does not say it is about host-managed IMEX", err)
			}
		})
	}
}

// nvidia-imex-ctl runs chrooted into the driver root, as NVIDIA's plugin runs it: it loads the
// driver's libraries, not the plugin image's, and is given the socket's path in the root. The
// stand-in is a static C program, which needs nothing from the root.
func TestHostIMEXCheckChrooted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root (the chart runs the plugin privileged)")
	}
	root, _ := testutil.HostIMEXFixture(t, "", 0, true)
	testutil.StaticIMEXCtl(t, root)
	h := HostIMEX{Root: DriverRoot{Root: driverroot.Root{Host: "/host", Container: root}}, Socket: "/s.sock"}
	if err := h.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	args, err := os.ReadFile(filepath.Join(root, "args"))
	if err != nil {
		t.Fatalf("the chrooted nvidia-imex-ctl wrote no /args in the root: %v", err)
	}
	if string(args) != "-q --u=/s.sock" {
		t.Errorf("nvidia-imex-ctl got %q, want the socket's path in the root", args)
	}
}
