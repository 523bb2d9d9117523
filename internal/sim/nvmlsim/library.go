package nvmlsim

import (
	"bytes"
	"context"
	_ "embed" // the library's C source
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"cdplane/internal/sim/imexsim"
)

// librarySource is the simulated NVML library's C source.
//
//go:embed libnvml/nvml_sim.c
var librarySource []byte

// LibraryFile is the simulated NVML library's file name where `cdplane sim up` builds it, in the
// sim's binary directory; nodehost.InstallDriverRoot installs it in each node's driver root
// under the names of the real one.
const LibraryFile = "libnvidia-ml-sim.so"

// LibrarySoname is the library's soname, the real NVML's.
const LibrarySoname = "libnvidia-ml.so.1"

// NodeDirEnv is the environment variable in which the library finds its node's directory: the
// one the simulated kubelet sets on every container.
const NodeDirEnv = imexsim.NodeDirEnv

// libraryCFlags are the compiler's arguments, less the output and the source: a shared library
// that exports NVML's entry points only, with the Go side's constants defined.
func libraryCFlags() []string {
	return []string{
		"-shared", "-fPIC", "-O2", "-std=c11", "-Wall", "-Wextra",
		"-fvisibility=hidden", "-pthread", "-Wl,-soname," + LibrarySoname,
		"-DNVML_SIM_NODE_DIR_ENV=" + strconv.Quote(NodeDirEnv),
		"-DNVML_SIM_CONF_PATH=" + strconv.Quote(ConfPath),
		"-DNVML_SIM_MAX_GPUS=" + strconv.Itoa(MaxGPUs),
		"-DNVML_SIM_MAX_LINE=" + strconv.Itoa(maxConfLine),
	}
}

// compiler is the C compiler: $CC (its first word, and any flags after), else cc.
func compiler() (string, []string) {
	if f := strings.Fields(os.Getenv("CC")); len(f) > 0 {
		return f[0], f[1:]
	}
	return "cc", nil
}

// BuildLibrary compiles the simulated NVML library into the file out (replaced whole, so that a
// process that loaded the previous one keeps it), with the C compiler ($CC, else cc) and
// extraFlags after the library's own (tests add -Werror).
func BuildLibrary(ctx context.Context, out string, extraFlags ...string) error {
	dir, err := os.MkdirTemp(filepath.Dir(out), ".nvml-sim-build-")
	if err != nil {
		return fmt.Errorf("building the simulated NVML library: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	src, lib := filepath.Join(dir, "nvml_sim.c"), filepath.Join(dir, LibraryFile)
	if err := os.WriteFile(src, librarySource, 0o644); err != nil {
		return fmt.Errorf("building the simulated NVML library: %w", err)
	}
	cc, args := compiler()
	args = append(append(append(args, libraryCFlags()...), extraFlags...), "-o", lib, src)
	cmd := exec.CommandContext(ctx, cc, args...)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			err = fmt.Errorf("%w (the simulator builds its NVML library from C: install a C compiler, or set CC)", err)
		}
		return fmt.Errorf("building the simulated NVML library (%s %s): %w\n%s", cc, strings.Join(args, " "), err, output.Bytes())
	}
	if err := os.Rename(lib, out); err != nil {
		return fmt.Errorf("building the simulated NVML library: %w", err)
	}
	return nil
}
