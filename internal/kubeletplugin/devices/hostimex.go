package devices

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
	"syscall"
	"time"

	"cdplane/internal/driverroot"
)

// hostIMEXCheckTimeout bounds one run of nvidia-imex-ctl.
const hostIMEXCheckTimeout = 10 * time.Second

// HostIMEX checks the host's nvidia-imex service through the driver root's nvidia-imex-ctl and
// the command socket the service listens on (Socket, a host path below the driver root).
type HostIMEX struct {
	Root   DriverRoot
	Socket string
	// noChroot runs nvidia-imex-ctl in place, never chrooted (tests whose stand-in is a script
	// that needs the test machine's /bin/sh).
	noChroot bool
}

// Check runs `nvidia-imex-ctl -q --u=<socket>` from the driver root and requires READY. Each
// failure names what is missing or what the daemon answered: no nvidia-imex-ctl under the
// root, no socket (the service is not running, or its config lacks the Unix socket), a query
// that fails or answers something else.
func (h HostIMEX) Check(ctx context.Context) error {
	if _, err := os.Stat(h.Root.Container); err != nil {
		return fmt.Errorf("host-managed IMEX: NVIDIA driver root %s (read at %s): %w", h.Root.Host, h.Root.Container, err)
	}
	l := h.Root.Find(driverroot.BinDirs, "nvidia-imex-ctl", true, false)
	if l.Rel == "" {
		return fmt.Errorf("host-managed IMEX: %w", h.Root.Miss("executable nvidia-imex-ctl", l, " (is the nvidia-imex package installed on this node?)"))
	}
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
	answer, ran, err := h.query(ctx, l.Rel)
	if err != nil {
		return fmt.Errorf("host-managed IMEX: %s: %w: %s", ran, err, answer)
	}
	if last := answer[strings.LastIndex(answer, "\n")+1:]; strings.TrimSpace(last) != "READY" {
		return fmt.Errorf("host-managed IMEX: the host nvidia-imex (socket %s) is not ready: %q", hostSocket, answer)
	}
	return nil
}

// query runs `nvidia-imex-ctl -q --u=<socket>` (ctl relative to the root), as NVIDIA's plugin
// runs it: chrooted into the driver root, so that it loads the driver's own libraries and the
// driver root's C++ runtime, not the plugin image's, and sees the socket at its path in the
// root. Where the plugin may not chroot (the chart runs it privileged; a test or an unprivileged
// run outside the chart cannot), or the root is the plugin's own "/", it runs the binary in
// place. It returns the answer and the command line run, for errors.
func (h HostIMEX) query(ctx context.Context, ctl string) (answer, ran string, err error) {
	run := func(chroot bool) (string, string, error) {
		var out bytes.Buffer
		var cmd *exec.Cmd
		if chroot {
			cmd = exec.CommandContext(ctx, "/"+ctl, "-q", "--u="+h.Socket) //nolint:gosec // the driver root's own tool
			cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: h.Root.Container}
			cmd.Dir = "/"
		} else {
			cmd = exec.CommandContext(ctx, filepath.Join(h.Root.Container, ctl), "-q", "--u="+filepath.Join(h.Root.Container, h.Socket)) //nolint:gosec // the driver root's own tool
		}
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		ran := strings.Join(cmd.Args, " ")
		if chroot {
			ran = "chroot " + h.Root.Container + " " + ran
		}
		return strings.TrimSpace(out.String()), ran, err
	}
	if h.Root.Container != "/" && !h.noChroot {
		answer, ran, err = run(true)
		if !errors.Is(err, syscall.EPERM) {
			return answer, ran, err
		}
	}
	return run(false)
}
