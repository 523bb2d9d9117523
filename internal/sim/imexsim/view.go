package imexsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Paths a containerized simulated IMEX needs, as the real nvidia-imex needs them in its
// container: the driver's control device, the IMEX management device (its minor read from the
// capability file) and the NVML library the binary links.
const (
	// CtlDevicePath is the driver's control device, which every NVIDIA program opens first.
	CtlDevicePath = "/dev/nvidiactl"
	// IMEXMgmtCapabilityPath is the capability file whose DeviceFileMinor names the IMEX
	// management device; it lies below the node directory (NodeDirEnv), as the host's /proc.
	IMEXMgmtCapabilityPath = "/proc/driver/nvidia/capabilities/fabric-imex-mgmt"
	// IMEXMgmtDeviceDir holds the management device, nvidia-cap<minor>.
	IMEXMgmtDeviceDir = "/dev/nvidia-caps"
	// NVMLLibrary is the driver library nvidia-imex links.
	NVMLLibrary = "libnvidia-ml.so.1"
	// LoaderExitCode is the exit status of a process whose dynamic loader could not load a
	// library it needs: the loader exits with it before the program runs.
	LoaderExitCode = 127
)

// StandardLibDirs are the directories the dynamic loader searches after LibraryPathEnv's: its
// default directories and those the ld.so.cache of NVIDIA's container images lists
// (/usr/local/nvidia/lib among them).
var StandardLibDirs = []string{
	"/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib",
}

// Messages of a containerized simulated IMEX that lacks what it needs. They follow the real
// programs' wording: glibc's dynamic loader's when a needed library is in none of its
// directories (the loader puts the program's path in front), and nvidia-imex's failure to open
// a device node, whose reason is strerror(ENOENT) as open(2) reports it.
const (
	msgLoaderNoLibrary   = "error while loading shared libraries: %s: cannot open shared object file: No such file or directory"
	msgCannotOpenCtl     = "failed to open %s: No such file or directory"
	msgCannotOpenMgmt    = "failed to open the IMEX management device %s: No such file or directory"
	msgCannotReadMgmtCap = "failed to read the IMEX management capability %s: %v"
)

// MissingError ends the start of a containerized simulated IMEX (ContainerPathsEnv set) whose
// container lacks what the real one needs: /dev/nvidiactl, the IMEX management device or
// libnvidia-ml.so.1. Its message is the one the real program, or the dynamic loader, prints.
type MissingError struct {
	// Path is the container path of the missing device node, or the library's name.
	Path string
	// Loader is true for a library the dynamic loader found in none of its directories: a
	// process exits with LoaderExitCode before nvidia-imex runs.
	Loader bool
	msg    string
}

func (e *MissingError) Error() string { return e.msg }

// EncodeContainerPaths renders a container's view for ContainerPathsEnv: a JSON object whose
// keys are the container's absolute paths of its device nodes and mounts and whose values are
// the host files or directories that stand for them, keys sorted, e.g.
//
//	{"/dev/nvidiactl":"/s/nodes/n1/dev/nvidiactl","/etc/hosts":"/s/pods/p/etc-hosts"}
//
// A path below a key lies below its value (a mounted directory); of the keys that cover a path
// the longest wins.
func EncodeContainerPaths(paths map[string]string) string {
	data, err := json.Marshal(paths)
	if err != nil { // a map of strings always encodes
		panic(fmt.Sprintf("encoding container paths: %v", err))
	}
	return string(data)
}

// DecodeContainerPaths parses ContainerPathsEnv's value (EncodeContainerPaths); a key or a
// value that is not an absolute path is an error naming it.
func DecodeContainerPaths(s string) (map[string]string, error) {
	var paths map[string]string
	if err := json.Unmarshal([]byte(s), &paths); err != nil {
		return nil, fmt.Errorf("not a JSON object of container paths to host paths: %w", err)
	}
	for c, h := range paths {
		if !path.IsAbs(c) || !filepath.IsAbs(h) {
			return nil, fmt.Errorf("%q -> %q: both paths must be absolute", c, h)
		}
	}
	return paths, nil
}

// containerView resolves container paths through a container's view.
type containerView struct {
	entries []viewEntry // cleaned, longest container path first
}

type viewEntry struct{ container, host string }

func decodeView(s string) (*containerView, error) {
	paths, err := DecodeContainerPaths(s)
	if err != nil {
		return nil, err
	}
	v := &containerView{}
	for c, h := range paths {
		v.entries = append(v.entries, viewEntry{container: path.Clean(c), host: filepath.Clean(h)})
	}
	sort.Slice(v.entries, func(i, j int) bool {
		a, b := v.entries[i].container, v.entries[j].container
		if len(a) != len(b) {
			return len(a) > len(b)
		}
		return a < b
	})
	return v, nil
}

// hostPath is the host path of the absolute container path p: through the longest key that
// covers it, or p itself when it already lies below one of the view's host paths (a value the
// simulated kubelet remapped, such as an LD_LIBRARY_PATH of one mounted directory). ok is false
// when the container has nothing at p.
func (v *containerView) hostPath(p string) (string, bool) {
	if !path.IsAbs(p) {
		return "", false
	}
	p = path.Clean(p)
	for _, e := range v.entries {
		switch {
		case e.container == "/":
			return filepath.Join(e.host, p), true
		case p == e.container:
			return e.host, true
		case strings.HasPrefix(p, e.container+"/"):
			return e.host + p[len(e.container):], true
		}
	}
	for _, e := range v.entries {
		if p == e.host || strings.HasPrefix(p, e.host+"/") {
			return p, true
		}
	}
	return "", false
}

// has reports whether the container has a file (not a directory) at p whose host file exists;
// links are followed, so a dangling one does not count.
func (v *containerView) has(p string) bool {
	host, ok := v.hostPath(p)
	if !ok {
		return false
	}
	fi, err := os.Stat(host)
	return err == nil && !fi.IsDir()
}

// loaderDirs are the directories the dynamic loader searches, in order: LibraryPathEnv's
// (colons or semicolons between them, relative ones skipped), then StandardLibDirs.
func (si standIns) loaderDirs() []string {
	var dirs []string
	for d := range strings.FieldsFuncSeq(si.libraryPath, func(r rune) bool { return r == ':' || r == ';' }) {
		if path.IsAbs(d) {
			dirs = append(dirs, d)
		}
	}
	return append(dirs, StandardLibDirs...)
}

// checkLibraries is the dynamic loader's part of a containerized IMEX's start: NVMLLibrary must
// be in one of the loader's directories as the container sees them. Outside a container there
// is nothing to check.
func (s *simServer) checkLibraries() error {
	view := s.env.view
	if view == nil {
		return nil
	}
	dirs := s.env.loaderDirs()
	for _, d := range dirs {
		if view.has(path.Join(d, NVMLLibrary)) {
			return nil
		}
	}
	s.log.Info("The container's view has "+NVMLLibrary+" in none of the loader's directories", "dirs", dirs)
	return &MissingError{Path: NVMLLibrary, Loader: true, msg: fmt.Sprintf(msgLoaderNoLibrary, NVMLLibrary)}
}

// checkDevices is the driver's part of a containerized IMEX's start: the container must have
// CtlDevicePath and the IMEX management device, whose minor the node's IMEXMgmtCapabilityPath
// gives, each with its host file. Outside a container there is nothing to check.
func (s *simServer) checkDevices() error {
	view := s.env.view
	if view == nil {
		return nil
	}
	if !view.has(CtlDevicePath) {
		return &MissingError{Path: CtlDevicePath, msg: fmt.Sprintf(msgCannotOpenCtl, CtlDevicePath)}
	}
	capFile := s.env.onNode(IMEXMgmtCapabilityPath)
	data, err := os.ReadFile(capFile)
	if err != nil {
		s.log.Info("Reading the node's IMEX management capability failed", "file", capFile, "err", err.Error())
		if errors.Is(err, fs.ErrNotExist) {
			err = errors.New("No such file or directory") //nolint:staticcheck // strerror(ENOENT), as the real program prints it
		}
		return fmt.Errorf(msgCannotReadMgmtCap, IMEXMgmtCapabilityPath, err)
	}
	minor, err := capabilityMinor(data)
	if err != nil {
		return fmt.Errorf(msgCannotReadMgmtCap, IMEXMgmtCapabilityPath, err)
	}
	mgmt := fmt.Sprintf("%s/nvidia-cap%d", IMEXMgmtDeviceDir, minor)
	if !view.has(mgmt) {
		return &MissingError{Path: mgmt, msg: fmt.Sprintf(msgCannotOpenMgmt, mgmt)}
	}
	return nil
}

// capabilityMinor reads "DeviceFileMinor: N" from an NVIDIA capability file.
func capabilityMinor(data []byte) (int, error) {
	for line := range strings.SplitSeq(string(data), "\n") {
		key, value, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(key) != "DeviceFileMinor" {
			continue
		}
		minor, err := strconv.Atoi(strings.TrimSpace(value))
		if err != nil || minor < 0 {
			return 0, fmt.Errorf("DeviceFileMinor %q is not a device number", strings.TrimSpace(value))
		}
		return minor, nil
	}
	return 0, errors.New("no DeviceFileMinor line")
}
