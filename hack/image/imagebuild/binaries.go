package imagebuild

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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

// BuildBinaries builds every command of repo into dir, reproducibly: -trimpath, no VCS stamp
// or build id, the commit given by -X, the version from internal/version's VERSION file.
// Commands that link cgo packages (go-nvml) build with CGO_ENABLED=1 against the C library the
// base layer carries; the others are static (CGO_ENABLED=0).
func BuildBinaries(repo, dir, commit string, log io.Writer) ([]string, error) {
	cmds, err := Commands(repo)
	if err != nil {
		return nil, err
	}
	withCgo, static, err := SplitCgo(repo, cmds)
	if err != nil {
		return nil, err
	}
	ldflags := "-s -w -buildid= -X cdplane/internal/version.Commit=" + commit
	for _, g := range []struct {
		cgo  string
		pkgs []string
	}{{"0", static}, {"1", withCgo}} {
		if len(g.pkgs) == 0 {
			continue
		}
		fmt.Fprintf(log, "Building (CGO_ENABLED=%s) %s\n", g.cgo, strings.Join(g.pkgs, " "))
		args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", dir + "/"}
		for _, c := range g.pkgs {
			args = append(args, "./cmd/"+c)
		}
		if _, err := goOutput(repo, []string{"CGO_ENABLED=" + g.cgo, "CGO_CFLAGS=" + CgoCFLAGS}, args...); err != nil {
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
