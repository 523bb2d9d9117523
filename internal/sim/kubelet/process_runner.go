package kubelet

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// ProcessRunner runs containers as local processes. Binaries maps an image repository (the
// image without tag or digest, see ImageRepository) to a directory of binaries: the
// container's command[0] is looked up by its base name in that directory and run with the rest
// of the command and the args, the container's environment (plus PATH with that directory
// first, unless the container sets PATH), its working directory, stdout and stderr to the log,
// in a session (and so a process group) of its own that signals go to. Processes die with this
// process (parent-death signal). A session of its own is, where the kernel groups tasks by
// session for scheduling (autogroups), a group of its own at the default priority: a container
// process does not share the simulated kubelet's lowered priority (sim.KubeletNice), as a real
// node's processes do not share another node's. In a large sim the controller, run as a process
// in the kubelet's session, was starved with it, missed its liveness probes and was restarted
// over and over.
//
// Images, when set, is a directory of loaded images (LoadedImageDir): an image found there
// runs its own binaries, before Binaries, so that two versions of one repository (an upgrade
// from the previous release) run side by side, each pod the version its image names, as a
// node's container runtime runs what was pulled.
type ProcessRunner struct {
	Binaries map[string]string
	Images   string
}

var _ Runner = (*ProcessRunner)(nil)

// LoadedImageDir is where image's binaries are in a directory of loaded images:
// <images>/<repository, path-escaped>/<tag>. An image without a tag is "latest", as a
// container runtime reads it; a digest is ignored (a loaded image is named by its tag).
func LoadedImageDir(images, image string) string {
	return filepath.Join(images, url.PathEscape(ImageRepository(image)), imageTag(image))
}

// imageTag returns an image reference's tag, "latest" without one.
func imageTag(image string) string {
	if i := strings.IndexByte(image, '@'); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndexByte(image, ':'); i >= 0 && !strings.Contains(image[i:], "/") {
		return image[i+1:]
	}
	return "latest"
}

// loaded returns the directory of image's binaries when it was loaded.
func (r *ProcessRunner) loaded(image string) (string, bool) {
	if r.Images == "" {
		return "", false
	}
	dir := LoadedImageDir(r.Images, image)
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return dir, true
	}
	return "", false
}

func (r *ProcessRunner) binary(image string, command []string) (string, string, error) {
	dir, ok := r.loaded(image)
	if !ok {
		dir, ok = r.Binaries[ImageRepository(image)]
	}
	if !ok {
		return "", "", fmt.Errorf("no binaries for image %s", image)
	}
	if len(command) == 0 {
		return "", "", fmt.Errorf("image %s: a simulated container needs a command", image)
	}
	path := filepath.Join(dir, filepath.Base(command[0]))
	if _, err := os.Stat(path); err != nil {
		return "", "", fmt.Errorf("image %s: %w", image, err)
	}
	return path, dir, nil
}

// Start starts the container's process.
func (r *ProcessRunner) Start(_ context.Context, spec *ContainerSpec) (Handle, error) {
	path, dir, err := r.binary(spec.Image, spec.Command)
	if err != nil {
		return nil, err
	}
	args := append(append([]string{}, spec.Command[1:]...), spec.Args...)
	cmd := exec.Command(path, args...)
	cmd.Env = withHostPath(spec.Environ(), dir)
	cmd.Dir = spec.WorkingDir
	cmd.Stdout, cmd.Stderr = spec.Log, spec.Log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", path, err)
	}
	h := &processHandle{cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		var exitErr *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &exitErr):
		default:
			h.code = -1
		}
		if h.code == 0 {
			h.code = exitCode(cmd.ProcessState)
		}
		close(h.done)
	}()
	return h, nil
}

// Exec runs a command of the image (an exec probe such as "cdplane-daemon check").
func (r *ProcessRunner) Exec(ctx context.Context, spec *ContainerSpec, command []string) (ExecResult, error) {
	path, _, err := r.binary(spec.Image, command)
	if err != nil {
		return ExecResult{}, err
	}
	return runExec(ctx, spec, path, command[1:])
}

type processHandle struct {
	cmd  *exec.Cmd
	done chan struct{}
	code int
}

func (h *processHandle) Done() <-chan struct{} { return h.done }

func (h *processHandle) ExitCode() int {
	<-h.done
	return h.code
}

func (h *processHandle) Signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("unsupported signal %v", sig)
	}
	select {
	case <-h.done:
		return nil
	default:
	}
	if err := syscall.Kill(-h.cmd.Process.Pid, s); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

func (h *processHandle) Kill() error { return h.Signal(syscall.SIGKILL) }
