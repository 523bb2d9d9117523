package imagebuild

import (
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// The host's architecture needs no cross compiler; another one's names Debian's packages when
// its compiler is missing.
func TestCrossCompiler(t *testing.T) {
	if cc, err := CrossCompiler(runtime.GOARCH); cc != "" || err != nil {
		t.Errorf("CrossCompiler(%s) = %q, %v; want cgo's default for the host", runtime.GOARCH, cc, err)
	}
	other := map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
	if other == "" {
		t.Skipf("the image has no platform for this %s host", runtime.GOARCH)
	}
	t.Setenv("PATH", t.TempDir())
	_, err := CrossCompiler(other)
	want := map[string]string{
		"arm64": "needs the cross compiler aarch64-linux-gnu-gcc: apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross",
		"amd64": "needs the cross compiler x86_64-linux-gnu-gcc: apt-get install gcc-x86-64-linux-gnu libc6-dev-amd64-cross",
	}[other]
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("CrossCompiler(%s) without it on PATH: %v, want an error with %q", other, err, want)
	}
	if _, err := Triplet("riscv64"); err == nil || !strings.Contains(err.Error(), "built for amd64 and arm64") {
		t.Errorf("Triplet(riscv64): %v, want an error naming the platforms", err)
	}
}

// An architecture dpkg was not told about is refused with the command that adds it.
func TestCheckDpkgArch(t *testing.T) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("no dpkg here")
	}
	err := CheckDpkgArch("s390x")
	if err == nil || !strings.Contains(err.Error(), "run `dpkg --add-architecture s390x && apt-get update` (as root) once") {
		t.Errorf("CheckDpkgArch(s390x): %v, want the command that adds it", err)
	}
}
