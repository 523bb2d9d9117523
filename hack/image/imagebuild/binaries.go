package imagebuild

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// CgoCFLAGS are the C flags of cdplane's cgo builds: the Go default (-O2 -g) without the
// deprecation warnings go-nvml's bindings of deprecated NVML calls print by the hundred.
const CgoCFLAGS = "-O2 -g -Wno-deprecated-declarations"

// Commands lists the binaries under repo/cmd: every one goes into the image.
func Commands(repo string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(repo, "cmd"))
	if err != nil {
		return nil, err
	}
	var cmds []string
	for _, e := range ents {
		if e.IsDir() {
			cmds = append(cmds, e.Name())
		}
	}
	sort.Strings(cmds)
	return cmds, nil
}

// SplitCgo divides commands (names under repo/cmd) into those that link cgo packages (go-nvml)
// and the rest.
func SplitCgo(repo string, cmds []string) (withCgo, static []string, err error) {
	for _, c := range cmds {
		pkgs, err := goOutput(repo, []string{"CGO_ENABLED=1"}, "list", "-deps", "-f", "{{if and (not .Standard) .CgoFiles}}{{.ImportPath}}{{end}}", "./cmd/"+c)
		if err != nil {
			return nil, nil, err
		}
		if strings.TrimSpace(pkgs) != "" {
			withCgo = append(withCgo, c)
		} else {
			static = append(static, c)
		}
	}
	return withCgo, static, nil
}

// Triplet is the GNU triplet of a Debian architecture: its libraries' directory
// (usr/lib/<triplet>) and its cross compiler's prefix (<triplet>-gcc).
func Triplet(arch string) (string, error) {
	switch arch {
	case "amd64":
		return "x86_64-linux-gnu", nil
	case "arm64":
		return "aarch64-linux-gnu", nil
	}
	return "", fmt.Errorf("architecture %q: the image is built for %s", arch, strings.Join(Arches, " and "))
}

// CrossCompiler is the C compiler cgo uses to build for arch on this host: "" when arch is the
// host's own (cgo's default, or $CC), else Debian's cross compiler <triplet>-gcc, which must be
// installed: the error names the Debian packages that bring it and the C library's headers.
func CrossCompiler(arch string) (string, error) {
	if arch == runtime.GOARCH {
		return "", nil
	}
	triplet, err := Triplet(arch)
	if err != nil {
		return "", err
	}
	cc := triplet + "-gcc"
	if _, err := exec.LookPath(cc); err != nil {
		return "", fmt.Errorf("building the cgo binaries for linux/%s on this %s host needs the cross compiler %s: "+
			"apt-get install gcc-%s libc6-dev-%s-cross", arch, runtime.GOARCH, cc, strings.ReplaceAll(triplet, "_", "-"), arch)
	}
	return cc, nil
}

// BuildBinaries builds every command of repo for linux/arch into dir, reproducibly: -trimpath,
// no VCS stamp or build id, the commit given by -X, the version from internal/version's VERSION
// file. Commands that link cgo packages (go-nvml) build with CGO_ENABLED=1 against the C library
// the base layer carries, with Debian's cross compiler for another architecture than the host's
// (CrossCompiler); the others are static (CGO_ENABLED=0).
func BuildBinaries(repo, dir, commit, arch string, log io.Writer) ([]string, error) {
	cmds, err := Commands(repo)
	if err != nil {
		return nil, err
	}
	withCgo, static, err := SplitCgo(repo, cmds)
	if err != nil {
		return nil, err
	}
	target := []string{"GOOS=linux", "GOARCH=" + arch}
	if len(withCgo) > 0 {
		cc, err := CrossCompiler(arch)
		if err != nil {
			return nil, err
		}
		if cc != "" {
			target = append(target, "CC="+cc)
		}
	}
	ldflags := "-s -w -buildid= -X cdplane/internal/version.Commit=" + commit
	for _, g := range []struct {
		cgo  string
		pkgs []string
	}{{"0", static}, {"1", withCgo}} {
		if len(g.pkgs) == 0 {
			continue
		}
		fmt.Fprintf(log, "Building linux/%s (CGO_ENABLED=%s) %s\n", arch, g.cgo, strings.Join(g.pkgs, " "))
		args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", dir + "/"}
		for _, c := range g.pkgs {
			args = append(args, "./cmd/"+c)
		}
		env := append([]string{"CGO_ENABLED=" + g.cgo, "CGO_CFLAGS=" + CgoCFLAGS}, target...)
		if _, err := goOutput(repo, env, args...); err != nil {
			return nil, err
		}
	}
	return cmds, nil
}

// goOutput runs the go command in repo with env added to the environment.
func goOutput(repo string, env []string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	if strings.Contains(stderr.String(), "warning:") {
		return "", fmt.Errorf("go %s printed compiler warnings (a build here prints none):\n%s", strings.Join(args, " "), stderr.String())
	}
	return stdout.String(), nil
}
