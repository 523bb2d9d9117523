package testutil

// Driver root fixtures for the kubelet plugin's tests (its devices, claims and command
// packages): files laid out as a GPU node's driver root has them.

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// DriverRootFixture lays out files (relative path: executable) under a new directory.
func DriverRootFixture(t *testing.T, files map[string]bool) string {
	t.Helper()
	root := t.TempDir()
	for rel, exec := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if exec {
			mode = 0o755
		}
		if err := os.WriteFile(p, nil, mode); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// HostIMEXFixture is a driver root whose nvidia-imex-ctl is a shell script answering answer
// (with exit status code) and recording its arguments, and, when listen, a Unix socket at
// /s.sock that stands for the host daemon's command socket.
func HostIMEXFixture(t *testing.T, answer string, code int, listen bool) (root, argsFile string) {
	t.Helper()
	// Short: a Unix socket path is limited to 107 bytes.
	root, err := os.MkdirTemp("", "hi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	argsFile = filepath.Join(root, "args")
	script := "#!/bin/sh\necho \"$@\" > " + argsFile + "\necho '" + answer + "'\nexit " + string(rune('0'+code)) + "\n"
	ctl := filepath.Join(root, "usr/bin/nvidia-imex-ctl")
	if err := os.MkdirAll(filepath.Dir(ctl), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ctl, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if listen {
		l, err := net.Listen("unix", filepath.Join(root, "s.sock"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
	}
	return root, argsFile
}

// StaticIMEXCtl replaces the root's nvidia-imex-ctl with a static C program that records its
// arguments in /args and answers READY; the test is skipped where none can be built.
func StaticIMEXCtl(t *testing.T, root string) {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	src := filepath.Join(t.TempDir(), "ctl.c")
	prog := `#include <stdio.h>
int main(int argc, char **argv) {
	FILE *f = fopen("/args", "w");
	if (!f) return 2;
	for (int i = 1; i < argc; i++) fprintf(f, "%s%s", i > 1 ? " " : "", argv[i]);
	fclose(f);
	printf("READY\n");
	return 0;
}
`
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	ctl := filepath.Join(root, "usr/bin/nvidia-imex-ctl")
	if out, err := exec.Command(cc, "-static", "-o", ctl, src).CombinedOutput(); err != nil {
		t.Skipf("no static C build here: %v\n%s", err, out)
	}
}
