package kubeletplugin

import (
	"context"
	"fmt"

	"cdplane/internal/component"
	"cdplane/internal/driverroot"
	"cdplane/internal/features"
	"cdplane/internal/kubeletplugin/devices"
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

// CheckHostIMEX is `cdplane-kubelet-plugin check-host-imex`: the driver root and socket come
// from the environment the chart gives the plugin container (NVIDIA_DRIVER_ROOT,
// CONTAINER_DRIVER_ROOT, IMEX_HOST_SOCKET_PATH), so that the probe checks what prepares check.
// It prints READY, or returns the reason.
func CheckHostIMEX(ctx context.Context, inv component.Invocation) error {
	if m := inv.Getenv(IMEXModeEnv); m != "" && features.IMEXMode(m) != features.IMEXHostManaged {
		return fmt.Errorf("%s: %s=%s: there is no host IMEX to check", CommandCheckHostIMEX, IMEXModeEnv, m)
	}
	root := inv.EnvOr(NvidiaDriverRootEnv, devices.DefaultNvidiaDriverRoot)
	h := devices.HostIMEX{
		Root:   devices.DriverRoot{Root: driverroot.Root{Host: root, Container: inv.EnvOr(ContainerDriverRootEnv, root)}},
		Socket: inv.EnvOr(HostIMEXSocketPathEnv, DefaultHostIMEXSocketPath),
	}
	if err := h.Check(ctx); err != nil {
		return err
	}
	_, err := fmt.Fprintln(inv.Stdout, "READY")
	return err
}
