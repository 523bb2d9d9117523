package kubeletplugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"cdplane/internal/component"
	"cdplane/internal/driverroot"
	"cdplane/internal/features"
)

// DefaultHostIMEXSocketPath is where a host nvidia-imex service's command socket is expected,
// below the driver root: its config sets IMEX_CMD_ENABLED=1 and
// IMEX_CMD_UNIX_DOMAIN_PATH=/etc/nvidia-imex/imex_ctrl.sock.
const DefaultHostIMEXSocketPath = "/etc/nvidia-imex/imex_ctrl.sock"

// Environment variables the host-IMEX readiness probe (CommandCheckHostIMEX) reads, set by the
// chart on the plugin container: a probe's command does not get the container's arguments.
const (
	IMEXModeEnv           = "IMEX_MODE"
	HostIMEXSocketPathEnv = "IMEX_HOST_SOCKET_PATH"
)

// CommandCheckHostIMEX is `cdplane-kubelet-plugin check-host-imex`, the plugin container's
// readiness probe in host-managed mode: it checks the host daemon once, exactly as a channel
// prepare does, and exits non-zero with the reason when it is not ready.
const CommandCheckHostIMEX = "check-host-imex"

// hostIMEXCheckTimeout bounds one run of nvidia-imex-ctl.
const hostIMEXCheckTimeout = 10 * time.Second

// hostIMEX checks the host's nvidia-imex service through the driver root's nvidia-imex-ctl and
// the command socket the service listens on (Socket, a host path below the driver root).
type hostIMEX struct {
	Root   driverRoot
	Socket string
}

// check runs `nvidia-imex-ctl -q --u=<socket>` from the driver root and requires READY. Each
// failure names what is missing or what the daemon answered: no nvidia-imex-ctl under the
// root, no socket (the service is not running, or its config lacks the Unix socket), a query
// that fails or answers something else.
func (h hostIMEX) check(ctx context.Context) error {
	if _, err := os.Stat(h.Root.Container); err != nil {
		return fmt.Errorf("host-managed IMEX: NVIDIA driver root %s (read at %s): %w", h.Root.Host, h.Root.Container, err)
	}
	l := h.Root.Find(driverroot.BinDirs, "nvidia-imex-ctl", true, false)
	if l.Rel == "" {
		return fmt.Errorf("host-managed IMEX: %w", h.Root.Miss("executable nvidia-imex-ctl", l, " (is the nvidia-imex package installed on this node?)"))
	}
	ctl := filepath.Join(h.Root.Container, l.Rel)
	hostSocket := path.Join(h.Root.Host, h.Socket)
	socket := filepath.Join(h.Root.Container, h.Socket)
	fi, err := os.Stat(socket)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("host-managed IMEX: no command socket at %s: is nvidia-imex running as a host service with IMEX_CMD_ENABLED=1 and IMEX_CMD_UNIX_DOMAIN_PATH=%s?",
			hostSocket, h.Socket)
	case err != nil:
		return fmt.Errorf("host-managed IMEX: command socket %s: %w", hostSocket, err)
	case fi.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("host-managed IMEX: %s is not a socket (%s)", hostSocket, fi.Mode().Type())
	}
	ctx, cancel := context.WithTimeout(ctx, hostIMEXCheckTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, ctl, "-q", "--u="+socket) //nolint:gosec // the driver root's own tool
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	answer := strings.TrimSpace(out.String())
	if err != nil {
		return fmt.Errorf("host-managed IMEX: %s -q --u=%s: %w: %s", ctl, socket, err, answer)
	}
	if last := answer[strings.LastIndex(answer, "\n")+1:]; strings.TrimSpace(last) != "READY" {
		return fmt.Errorf("host-managed IMEX: the host nvidia-imex (socket %s) is not ready: %q", hostSocket, answer)
	}
	return nil
}

// CheckHostIMEX is `cdplane-kubelet-plugin check-host-imex`: the driver root and socket come
// from the environment the chart gives the plugin container (NVIDIA_DRIVER_ROOT,
// CONTAINER_DRIVER_ROOT, IMEX_HOST_SOCKET_PATH), so that the probe checks what prepares check.
// It prints READY, or returns the reason.
func CheckHostIMEX(ctx context.Context, inv component.Invocation) error {
	if m := inv.Getenv(IMEXModeEnv); m != "" && features.IMEXMode(m) != features.IMEXHostManaged {
		return fmt.Errorf("%s: %s=%s: there is no host IMEX to check", CommandCheckHostIMEX, IMEXModeEnv, m)
	}
	root := inv.EnvOr(NvidiaDriverRootEnv, DefaultNvidiaDriverRoot)
	h := hostIMEX{
		Root:   driverRoot{Root: driverroot.Root{Host: root, Container: inv.EnvOr(ContainerDriverRootEnv, root)}},
		Socket: inv.EnvOr(HostIMEXSocketPathEnv, DefaultHostIMEXSocketPath),
	}
	if err := h.check(ctx); err != nil {
		return err
	}
	_, err := fmt.Fprintln(inv.Stdout, "READY")
	return err
}
