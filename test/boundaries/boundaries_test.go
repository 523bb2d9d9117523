// Package boundaries checks the layout's rules on the import graph (`go list`): product
// packages import nothing simulated or test-only, test helpers reach production code only from
// tests, and each component binary links only its own component. golangci-lint's depguard
// (.golangci.yml) states the first two for editors; this test makes them fail `make test`.
package boundaries

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "cdplane"

// product are the packages cdplane ships (with their subpackages); nonProduct are what they
// must never import.
var (
	product = []string{
		"api", "cmd/cdplane-controller", "cmd/cdplane-daemon", "cmd/cdplane-kubelet-plugin", "cmd/cdplane-nvml",
		"internal/atomicfile", "internal/component", "internal/controller", "internal/daemon", "internal/daemonenv", "internal/features",
		"internal/imex", "internal/kubeletplugin", "internal/metrics", "internal/nvml", "internal/plane", "internal/scheme", "internal/version",
	}
	nonProduct = []string{"internal/sim", "internal/bench", "internal/cli", "internal/testutil", "test", "hack"}
)

// components: each binary, and the component packages it must not link.
var components = map[string][]string{
	"cmd/cdplane-controller":     {"internal/daemon", "internal/kubeletplugin", "internal/imex", "internal/nvml"},
	"cmd/cdplane-daemon":         {"internal/controller", "internal/kubeletplugin"},
	"cmd/cdplane-kubelet-plugin": {"internal/controller", "internal/daemon"},
}

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func goList(t *testing.T, args ...string) []pkg {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	cmd := exec.Command("go", append([]string{"list", "-json=ImportPath,Imports,Deps"}, args...)...)
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// under reports whether import path p is dir or below it (dir relative to the module).
func under(p, dir string) bool {
	full := module + "/" + dir
	return p == full || strings.HasPrefix(p, full+"/")
}

func underAny(p string, dirs []string) bool {
	return slices.ContainsFunc(dirs, func(d string) bool { return under(p, d) })
}

// violations lists "a imports b" for each non-test import that crosses the rules.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		for _, imp := range p.Imports {
			switch {
			case underAny(p.ImportPath, product) && underAny(imp, nonProduct):
				out = append(out, fmt.Sprintf("product package %s imports %s", p.ImportPath, imp))
			case under(imp, "internal/testutil") && !under(p.ImportPath, "internal/testutil") && !under(p.ImportPath, "test"):
				out = append(out, fmt.Sprintf("%s imports test helpers %s outside a test", p.ImportPath, imp))
			}
		}
	}
	return out
}

func TestProductImportsNothingSimulated(t *testing.T) {
	if v := violations(goList(t, "./...")); len(v) > 0 {
		t.Errorf("boundaries crossed:\n%s", strings.Join(v, "\n"))
	}
}

// The rule itself must catch a crossing: a product package importing the simulator, and
// production code importing test helpers.
func TestViolationsAreFound(t *testing.T) {
	got := violations([]pkg{
		{ImportPath: "cdplane/internal/kubeletplugin", Imports: []string{"cdplane/internal/sim/nvmlsim"}},
		{ImportPath: "cdplane/internal/cli", Imports: []string{"cdplane/internal/testutil/cluster"}},
		{ImportPath: "cdplane/internal/sim", Imports: []string{"cdplane/internal/kubeletplugin"}},
		{ImportPath: "cdplane/test/e2e", Imports: []string{"cdplane/internal/testutil"}},
	})
	if len(got) != 2 {
		t.Errorf("violations %q, want the plugin importing the simulator and the CLI importing test helpers", got)
	}
}

func TestEachBinaryLinksOnlyItsComponent(t *testing.T) {
	for bin, forbidden := range components {
		pkgs := goList(t, "-deps=false", "./"+bin)
		deps := goList(t, "./"+bin)
		if len(pkgs) != 1 || len(deps) != 1 {
			t.Fatalf("go list ./%s: %d packages", bin, len(deps))
		}
		for _, d := range deps[0].Deps {
			if underAny(d, forbidden) {
				t.Errorf("%s links %s", bin, d)
			}
			if underAny(d, nonProduct) {
				t.Errorf("%s links non-product package %s", bin, d)
			}
		}
	}
}
