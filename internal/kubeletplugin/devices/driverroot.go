package devices

import (
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/component-base/featuregate"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"cdplane/internal/daemonenv"
	"cdplane/internal/driverroot"
	"cdplane/internal/features"
	"cdplane/internal/imex"
	"cdplane/internal/kubeletplugin/failure"
)

// DefaultNvidiaDriverRoot is the host's NVIDIA driver root: / where the driver is installed on
// the host itself.
const DefaultNvidiaDriverRoot = "/"

// DefaultDevRoot is where the plugin's pod mounts the host's /dev.
const DefaultDevRoot = "/dev"

// Where a daemon container sees the host driver's files (the daemonenv IMEX_BINARY,
// IMEX_CTL_BINARY and NVML_LIBRARY values).
const (
	ContainerIMEXBinary    = "/usr/local/nvidia/bin/nvidia-imex"
	ContainerIMEXCtlBinary = "/usr/local/nvidia/bin/nvidia-imex-ctl"
	ContainerNVMLLibrary   = "/usr/local/nvidia/lib/libnvidia-ml.so.1"
)

// ContainerDriverLibDir is the daemon container's directory of the driver libraries it gets
// (LD_LIBRARY_PATH), and ctlDevice the driver's control device every NVIDIA program opens.
const (
	ContainerDriverLibDir = "/usr/local/nvidia/lib"
	ctlDevice             = "dev/nvidiactl"
)

// DriverRoot is the host driver's root as the plugin reads it (Container) and as the container
// runtime sees it on the host (Host); they differ when the plugin runs in a pod that mounts the
// host's driver root elsewhere. Dev is where the plugin reads the host's /dev (the chart mounts
// it at /dev), for a driver installed on the host whose root holds no device nodes; "": only
// the root's. An empty Host disables the injection.
type DriverRoot struct {
	driverroot.Root
	Dev string
}

// DriverFiles are the host driver's files a daemon container gets: paths relative to the driver
// root with every link resolved inside it, and the host path of the control device.
type DriverFiles struct {
	IMEX, IMEXCtl, NVML string
	// Libs are the driver libraries the IMEX binaries link, by soname (NVML among them).
	Libs map[string]string
	// CtlDevice is /dev/nvidiactl's host path: below the driver root when the root holds the
	// driver's device nodes (a driver container), else the host's.
	CtlDevice string
}

// Locate finds what nvidia-imex needs from the root: the IMEX binaries, the NVML library, the
// driver libraries the binaries link, and the control device. A root that does not exist or
// lacks any of them is an error naming the root, what is missing and every place tried.
func (r DriverRoot) Locate() (DriverFiles, error) {
	if fi, err := os.Stat(r.Container); err != nil || !fi.IsDir() {
		if err == nil {
			err = fmt.Errorf("not a directory")
		}
		return DriverFiles{}, fmt.Errorf("NVIDIA driver root %s (read at %s): %w", r.Host, r.Container, err)
	}
	var f DriverFiles
	for _, b := range []struct {
		name string
		rel  *string
	}{{"nvidia-imex", &f.IMEX}, {"nvidia-imex-ctl", &f.IMEXCtl}} {
		l := r.Find(driverroot.BinDirs, b.name, true, false)
		if l.Rel == "" {
			return DriverFiles{}, r.Miss("executable "+b.name, l, " (is the nvidia-imex package of the driver installed?)")
		}
		*b.rel = l.Rel
	}
	nvmlPath, l := r.FindNVML()
	if nvmlPath == "" {
		return DriverFiles{}, r.Miss(driverroot.NVMLLibrary, l, "")
	}
	f.NVML = l.Rel
	libs, err := r.NeededDriverLibs([]string{f.IMEX, f.IMEXCtl})
	if err != nil {
		return DriverFiles{}, err
	}
	libs[driverroot.NVMLLibrary] = f.NVML
	f.Libs = libs
	if f.CtlDevice, err = r.ctlDevice(); err != nil {
		return DriverFiles{}, err
	}
	return f, nil
}

// ctlDevice finds /dev/nvidiactl: in the driver root (a driver container creates the device
// nodes in its root), else in the host's /dev.
func (r DriverRoot) ctlDevice() (string, error) {
	tried := []string{filepath.Join(r.Container, ctlDevice)}
	if _, err := os.Stat(tried[0]); err == nil {
		return path.Join(r.Host, ctlDevice), nil
	}
	if r.Dev != "" {
		p := filepath.Join(r.Dev, path.Base(ctlDevice))
		tried = append(tried, p)
		if _, err := os.Stat(p); err == nil {
			return "/" + ctlDevice, nil
		}
	}
	return "", fmt.Errorf("no NVIDIA control device %s (tried %s): is the NVIDIA kernel driver loaded?",
		"/"+ctlDevice, strings.Join(tried, ", "))
}

// Edits are the daemon container's edits of f: /dev/nvidiactl; a read-only bind mount of each
// IMEX binary at its fixed container path and of each driver library in ContainerDriverLibDir
// under its soname; and, set in env, the daemonenv variables that name those paths,
// LD_LIBRARY_PATH, and NVIDIA_VISIBLE_DEVICES=void (daemon containers get no GPU). No root
// (tests): no edits.
func (r DriverRoot) Edits(f DriverFiles, env *daemonenv.Claim) ([]*cdispec.Mount, []*cdispec.DeviceNode) {
	if r.Host == "" {
		return nil, nil
	}
	var mounts []*cdispec.Mount
	env.NoGPUs = true
	add := func(rel, ctrPath string) {
		mounts = append(mounts, &cdispec.Mount{
			HostPath: path.Join(r.Host, rel), ContainerPath: ctrPath,
			Options: []string{"ro", "nosuid", "nodev", "bind"},
		})
	}
	add(f.IMEX, ContainerIMEXBinary)
	env.IMEXBinary = ContainerIMEXBinary
	add(f.IMEXCtl, ContainerIMEXCtlBinary)
	env.IMEXCtlBinary = ContainerIMEXCtlBinary
	for _, name := range slices.Sorted(maps.Keys(f.Libs)) {
		add(f.Libs[name], path.Join(ContainerDriverLibDir, name))
	}
	env.NVMLLibrary = ContainerNVMLLibrary
	env.LibraryPath = ContainerDriverLibDir
	var devices []*cdispec.DeviceNode
	if f.CtlDevice != "" {
		devices = append(devices, &cdispec.DeviceNode{Path: "/" + ctlDevice, HostPath: f.CtlDevice})
	}
	return mounts, devices
}

// hostIMEXUnitLinks are where systemd keeps an enabled nvidia-imex service's unit link, relative
// to the root.
var hostIMEXUnitLinks = []string{
	"etc/systemd/system/multi-user.target.wants/nvidia-imex.service",
	"etc/systemd/system/default.target.wants/nvidia-imex.service",
}

// HostIMEXService returns the path (as on the node) of an enabled nvidia-imex service's unit
// link in the root, or "": a daemon whose IMEX cannot get the node's session names it.
func (r DriverRoot) HostIMEXService() string {
	for _, rel := range hostIMEXUnitLinks {
		if _, err := os.Lstat(filepath.Join(r.Container, rel)); err == nil {
			return "/" + rel
		}
	}
	return ""
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
			if imex.IsDottedVersion(f) {
				return f, true
			}
		}
	}
	return "", false
}

// nvmlVersion returns the driver version the root's NVML library belongs to: the driver
// installs libnvidia-ml.so.1 as a link to libnvidia-ml.so.<version>.
// rel has its links resolved inside the root already (locate).
func (r DriverRoot) nvmlVersion(rel string) (string, bool) {
	if rel == "" {
		return "", false
	}
	v, ok := strings.CutPrefix(path.Base(rel), "libnvidia-ml.so.")
	if !ok || !imex.IsDottedVersion(v) {
		return "", false
	}
	return v, true
}

// CheckVersion refuses a driver root whose driver is not the loaded one: its nvidia-imex would
// not match the kernel driver (IMEX checks the loaded driver at start and aborts on a mismatch),
// typically a driver root left from a previous driver or pointing at the wrong installation. It
// compares the root's NVML library version with the kernel module's; when either cannot be
// read (no version file, an unversioned library) there is nothing to compare.
func (r DriverRoot) CheckVersion(f DriverFiles, kernelVersionFile []byte) error {
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

// CheckIMEXNames refuses, as NVIDIA's driver does, to run daemons with IMEXDaemonsWithDNSNames on
// a node whose loaded driver predates IMEX's support for names in its node list: its IMEX would
// refuse the node list the daemon writes. The error names both versions and the way out. A node
// whose driver version cannot be read is not refused.
func CheckIMEXNames(gates featuregate.FeatureGate, readHostFile func(string) ([]byte, error), node string) error {
	if !gates.Enabled(features.IMEXDaemonsWithDNSNames) {
		return nil
	}
	data, err := readHostFile(DriverVersionFile)
	if err != nil {
		return nil
	}
	version, ok := KernelDriverVersion(data)
	if !ok {
		return nil
	}
	if names, err := imex.DriverSupportsHostnames(version); err != nil || names {
		return nil
	}
	return failure.Permanentf("feature gate %s needs NVIDIA driver %s or later (IMEX takes host names in its node list from that version), but node %s runs %s: upgrade the driver, or turn %s off (with %s off too: featureGates.%s=false,%s=false)",
		features.IMEXDaemonsWithDNSNames, imex.HostnamesMinDriverVersion, node, version,
		features.IMEXDaemonsWithDNSNames, features.ComputeDomainCliques, features.ComputeDomainCliques, features.IMEXDaemonsWithDNSNames)
}
