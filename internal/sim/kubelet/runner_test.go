package kubelet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// toolRouter returns a router that runs image example.com/tool's command "tool" as script, and
// the directory the script is in.
func toolRouter(t *testing.T, script string) (*Router, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tool"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return NewProcessRouter(map[string]string{"example.com/tool": dir}, ""), dir
}

func waitDone(t *testing.T, h Handle) int {
	t.Helper()
	select {
	case <-h.Done():
		return h.ExitCode()
	case <-time.After(10 * time.Second):
		t.Fatal("container did not exit")
		return 0
	}
}

// TestProcessRunner: command[0] is found by its base name in the image's directory, args and
// env are passed, output goes to the log, exit codes and signals are reported.
func TestProcessRunner(t *testing.T) {
	r, dir := toolRouter(t, "#!/bin/sh\necho \"$GREETING $*\"\nif [ \"$1\" = wait ]; then while :; do sleep 0.1; done; fi\nexit 3\n")
	var log bytes.Buffer
	spec := &ContainerSpec{Image: "example.com/tool:v1", Command: []string{"/usr/local/bin/tool"}, Args: []string{"a", "b"},
		Env: []EnvVar{{Name: "GREETING", Value: "hi"}}, WorkingDir: dir, Log: &log}
	h, err := r.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if code := waitDone(t, h); code != 3 {
		t.Errorf("exit code %d, want 3", code)
	}
	if got := log.String(); got != "hi a b\n" {
		t.Errorf("log %q, want %q", got, "hi a b\n")
	}

	spec.Args = []string{"wait"}
	h, err = r.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitDone(t, h); code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit code after SIGTERM %d, want %d", code, 128+int(syscall.SIGTERM))
	}

	res, err := r.Exec(context.Background(), spec, []string{"tool", "x"})
	if err != nil || res.ExitCode != 3 || !strings.Contains(string(res.Output), "hi x") {
		t.Errorf("exec: %+v, %v", res, err)
	}
	if _, err := r.Start(context.Background(), &ContainerSpec{Image: "example.com/tool:v1"}); err == nil {
		t.Error("a container without command started")
	}
}

// TestNoopRunner: the record is written; the stand-in runs until stopped, or exits as the
// annotations say; exec runs host commands.
func TestNoopRunner(t *testing.T) {
	var log bytes.Buffer
	h, err := NoopRunner{}.Start(context.Background(), &ContainerSpec{Command: []string{"x"}, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
		t.Fatal("noop container exited by itself")
	case <-time.After(100 * time.Millisecond):
	}
	_ = h.Signal(syscall.SIGTERM)
	if code := waitDone(t, h); code != 0 {
		t.Errorf("exit code after SIGTERM %d, want 0", code)
	}
	if log.String() != "ARGS x\n" {
		t.Errorf("record %q", log.String())
	}
	h, err = NoopRunner{}.Start(context.Background(), &ContainerSpec{Annotations: map[string]string{AnnotationExitCode: "7"}})
	if err != nil {
		t.Fatal(err)
	}
	if code := waitDone(t, h); code != 7 {
		t.Errorf("exit code %d, want 7", code)
	}
	h, _ = NoopRunner{}.Start(context.Background(), &ContainerSpec{})
	_ = h.Kill()
	if code := waitDone(t, h); code != 137 {
		t.Errorf("exit code after kill %d, want 137", code)
	}
	dir := t.TempDir()
	spec := &ContainerSpec{WorkingDir: dir}
	if res, err := (NoopRunner{}).Exec(context.Background(), spec, []string{"test", "-f", filepath.Join(dir, "ready")}); err != nil || res.ExitCode != 1 {
		t.Errorf("exec before the file exists: %+v, %v", res, err)
	}
	_ = os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644)
	if res, err := (NoopRunner{}).Exec(context.Background(), spec, []string{"test", "-f", filepath.Join(dir, "ready")}); err != nil || res.ExitCode != 0 {
		t.Errorf("exec after the file exists: %+v, %v", res, err)
	}
}

func TestImageRepository(t *testing.T) {
	for in, want := range map[string]string{
		"cdplane":                            "cdplane",
		"cdplane:v1":                         "cdplane",
		"registry:5000/cdplane":              "registry:5000/cdplane",
		"registry:5000/cdplane:v1":           "registry:5000/cdplane",
		"ghcr.io/x/cdplane:v1@sha256:abcdef": "ghcr.io/x/cdplane",
		"cdplane@sha256:abcdef":              "cdplane",
	} {
		if got := ImageRepository(in); got != want {
			t.Errorf("ImageRepository(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestProcessRunnerSessionOfItsOwn: a container process leads a session and process group of its
// own, so that it gets a scheduling autogroup of its own at the default priority (not the
// kubelet's), and a signal reaches the whole group.
func TestProcessRunnerSessionOfItsOwn(t *testing.T) {
	r, _ := toolRouter(t, "#!/bin/sh\nwhile :; do sleep 0.1; done\n")
	h, err := r.Start(context.Background(), &ContainerSpec{Image: "example.com/tool:v1", Command: []string{"tool"}, Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = h.Kill()
		waitDone(t, h)
	}()
	pid := h.(*processHandle).cmd.Process.Pid
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// After "(comm) ": state, ppid, pgrp, session.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
	if f[2] != strconv.Itoa(pid) || f[3] != strconv.Itoa(pid) {
		t.Errorf("process %d in group %s, session %s; want both its own", pid, f[2], f[3])
	}
	ours, err := os.ReadFile("/proc/self/autogroup")
	if err != nil {
		t.Logf("no autogroups here (%v): the session is checked only", err)
		return
	}
	theirs, err := os.ReadFile(fmt.Sprintf("/proc/%d/autogroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(ours, theirs) || !strings.HasSuffix(strings.TrimSpace(string(theirs)), "nice 0") {
		t.Errorf("container's autogroup %q (the test's %q), want one of its own at nice 0", theirs, ours)
	}
}

// TestLoadedImagesRunTheirOwnBinaries: an image loaded into the images directory runs its own
// binaries, another tag of the same repository the built ones, and a loaded image of a
// repository the router does not know runs too: two versions of one image side by side, as an
// upgrade runs them.
func TestLoadedImagesRunTheirOwnBinaries(t *testing.T) {
	built, images := t.TempDir(), t.TempDir()
	write := func(dir, says string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "tool"), []byte("#!/bin/sh\necho "+says+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(built, "built")
	write(LoadedImageDir(images, "example.com/tool:0.1.0"), "loaded-0.1.0")
	write(LoadedImageDir(images, "registry.local:5000/team/tool"), "loaded-latest")
	r := NewProcessRouter(map[string]string{"example.com/tool": built}, images)
	for image, want := range map[string]string{
		"example.com/tool:sim":                       "built",
		"example.com/tool:0.1.0":                     "loaded-0.1.0",
		"example.com/tool:0.1.0@sha256:0123456789ab": "loaded-0.1.0",
		"registry.local:5000/team/tool":              "loaded-latest",
		"registry.local:5000/team/tool:latest":       "loaded-latest",
	} {
		var log bytes.Buffer
		h, err := r.Start(context.Background(), &ContainerSpec{Image: image, Command: []string{"tool"}, Log: &log})
		if err != nil {
			t.Fatalf("%s: %v", image, err)
		}
		waitDone(t, h)
		if got := strings.TrimSpace(log.String()); got != want {
			t.Errorf("image %s ran %q, want %q", image, got, want)
		}
	}
	// Not loaded and not built: the stand-in, which records what it was given.
	var log bytes.Buffer
	h, err := r.Start(context.Background(), &ContainerSpec{Image: "registry.local:5000/team/tool:2.0", Command: []string{"tool"}, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Kill() }()
	if strings.Contains(log.String(), "loaded") {
		t.Errorf("an image that was not loaded ran a loaded one's binaries: %q", log.String())
	}
}
