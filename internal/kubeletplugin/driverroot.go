package kubeletplugin

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"cdplane/internal/daemonenv"
)

// DefaultNvidiaDriverRoot is the host's NVIDIA driver root: / where the driver is installed on
// the host itself.
const DefaultNvidiaDriverRoot = "/"

// Where a daemon container sees the host driver's files (the daemonenv IMEX_BINARY,
// IMEX_CTL_BINARY and NVML_LIBRARY values).
const (
	ContainerIMEXBinary    = "/usr/local/nvidia/bin/nvidia-imex"
	ContainerIMEXCtlBinary = "/usr/local/nvidia/bin/nvidia-imex-ctl"
	ContainerNVMLLibrary   = "/usr/local/nvidia/lib/libnvidia-ml.so.1"
)

// Directories of a driver root searched for the IMEX binaries and for the NVML library, in
// order.
var (
	driverBinDirs = []string{"usr/bin", "usr/sbin", "bin", "sbin"}
	driverLibDirs = []string{"usr/lib/x86_64-linux-gnu", "usr/lib64", "usr/lib/aarch64-linux-gnu", "lib64", "usr/lib"}
)

// driverRoot is the host driver's root as the plugin reads it (Container) and as the container
// runtime sees it on the host (Host); they differ when the plugin runs in a pod that mounts the
// host's driver root elsewhere. An empty Host disables the injection.
type driverRoot struct{ Host, Container string }

// driverFiles are the host driver's files a daemon container gets, as paths relative to the
// driver root; NVML is empty when the root has no NVML library (the daemon needs it only when
// the plugin does not give it CLIQUE_ID, which the plugin always does).
type driverFiles struct{ IMEX, IMEXCtl, NVML string }

// locate finds the IMEX binaries and the NVML library under the root. A root that does not
// exist or lacks an IMEX binary is an error naming the root and what is missing.
func (r driverRoot) locate() (driverFiles, error) {
	if fi, err := os.Stat(r.Container); err != nil || !fi.IsDir() {
		if err == nil {
			err = fmt.Errorf("not a directory")
		}
		return driverFiles{}, fmt.Errorf("NVIDIA driver root %s (read at %s): %w", r.Host, r.Container, err)
	}
	f := driverFiles{
		IMEX:    r.find(driverBinDirs, "nvidia-imex", true),
		IMEXCtl: r.find(driverBinDirs, "nvidia-imex-ctl", true),
		NVML:    r.find(driverLibDirs, "libnvidia-ml.so.1", false),
	}
	var missing []string
	if f.IMEX == "" {
		missing = append(missing, "nvidia-imex")
	}
	if f.IMEXCtl == "" {
		missing = append(missing, "nvidia-imex-ctl")
	}
	if len(missing) > 0 {
		return driverFiles{}, fmt.Errorf("NVIDIA driver root %s (read at %s) has no executable %s in %s",
			r.Host, r.Container, strings.Join(missing, " or "), strings.Join(driverBinDirs, ", "))
	}
	return f, nil
}

// find returns the path, relative to the root, of the first file name in dirs (executable when
// exec), or "".
func (r driverRoot) find(dirs []string, name string, exec bool) string {
	for _, d := range dirs {
		rel := path.Join(d, name)
		fi, err := os.Stat(filepath.Join(r.Container, rel))
		if err != nil || fi.IsDir() || (exec && fi.Mode().Perm()&0o111 == 0) {
			continue
		}
		return rel
	}
	return ""
}

// edits are the daemon container's edits of f: a read-only bind mount of each file at its fixed
// container path, and, set in env, the daemonenv variables that name those paths and
// NVIDIA_VISIBLE_DEVICES=void (daemon containers get no GPU). No root (tests): no edits.
func (r driverRoot) edits(f driverFiles, env *daemonenv.Claim) []*cdispec.Mount {
	if r.Host == "" {
		return nil
	}
	var mounts []*cdispec.Mount
	env.NoGPUs = true
	add := func(rel, ctrPath string, v *string) {
		if rel == "" {
			return
		}
		mounts = append(mounts, &cdispec.Mount{
			HostPath: path.Join(r.Host, rel), ContainerPath: ctrPath,
			Options: []string{"ro", "nosuid", "nodev", "bind"},
		})
		*v = ctrPath
	}
	add(f.IMEX, ContainerIMEXBinary, &env.IMEXBinary)
	add(f.IMEXCtl, ContainerIMEXCtlBinary, &env.IMEXCtlBinary)
	add(f.NVML, ContainerNVMLLibrary, &env.NVMLLibrary)
	return mounts
}

// DriverVersionFile is the loaded kernel driver's version file, read through the host's
// ReadHostFile.
const DriverVersionFile = "/proc/driver/nvidia/version"

// KernelDriverVersion returns the version of the loaded kernel module from DriverVersionFile's
// content ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.133.20  …", or "… Open Kernel
// Module for aarch64  570.133.20  Release Build …"): the first field of the NVRM line that is
// a dotted version.
func KernelDriverVersion(data []byte) (string, bool) {
	for line := range strings.SplitSeq(string(data), "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "NVRM version:")
		if !ok {
			continue
		}
		for f := range strings.FieldsSeq(rest) {
			if isDottedVersion(f) {
				return f, true
			}
		}
	}
	return "", false
}

// isDottedVersion reports whether s is digits separated by single dots, with at least one dot.
func isDottedVersion(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) < 2 {
		return false
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}

// nvmlVersion returns the driver version the root's NVML library belongs to: the driver
// installs libnvidia-ml.so.1 as a link to libnvidia-ml.so.<version>.
func (r driverRoot) nvmlVersion(rel string) (string, bool) {
	if rel == "" {
		return "", false
	}
	target, err := filepath.EvalSymlinks(filepath.Join(r.Container, rel))
	if err != nil {
		return "", false
	}
	v, ok := strings.CutPrefix(filepath.Base(target), "libnvidia-ml.so.")
	if !ok || !isDottedVersion(v) {
		return "", false
	}
	return v, true
}

// checkVersion refuses a driver root whose driver is not the loaded one: its nvidia-imex would
// not match the kernel driver (IMEX checks the loaded driver at start and aborts on a mismatch),
// typically a driver root left from a previous driver or pointing at the wrong installation. It
// compares the root's NVML library version with the kernel module's; when either cannot be
// read (no version file, an unversioned library) there is nothing to compare.
func (r driverRoot) checkVersion(f driverFiles, kernelVersionFile []byte) error {
	kernel, ok := KernelDriverVersion(kernelVersionFile)
	if !ok {
		return nil
	}
	root, ok := r.nvmlVersion(f.NVML)
	if !ok || root == kernel {
		return nil
	}
	return fmt.Errorf("NVIDIA driver root %s holds driver %s (%s), but the loaded kernel driver is %s (%s): its nvidia-imex would not match the kernel driver; point nvidiaDriverRoot at the loaded driver's root",
		r.Host, root, path.Join(r.Host, f.NVML), kernel, DriverVersionFile)
}
