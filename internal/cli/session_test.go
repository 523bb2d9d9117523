package cli

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMain lets a test run this binary as cdplane itself (CDPLANE_TEST_MAIN=1): a command that
// runs itself again (runLowered) starts os.Executable(), which in a test is the test binary.
func TestMain(m *testing.M) {
	if os.Getenv("CDPLANE_TEST_MAIN") == "1" {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestLowerSession: the nice value is written to the autogroup file; nothing is written, and
// no error returned, where autogroups are off or absent. Temporary files stand for /proc's: the
// test's real autogroup is its whole session's, the shell's and `go test`'s.
func TestLowerSession(t *testing.T) {
	dir := t.TempDir()
	autogroup, enabled := filepath.Join(dir, "autogroup"), filepath.Join(dir, "enabled")
	write := func(path, content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(autogroup, "/autogroup-1 nice 0\n")
	write(enabled, "1\n")
	if ok, err := lowerSession(autogroup, enabled, 10); !ok || err != nil {
		t.Fatalf("autogroups on: lowered %v, %v; want true, nil", ok, err)
	}
	if data, _ := os.ReadFile(autogroup); string(data) != "10" {
		t.Errorf("autogroup file %q, want 10 written", data)
	}

	write(autogroup, "/autogroup-1 nice 0\n")
	write(enabled, "0\n")
	if ok, err := lowerSession(autogroup, enabled, 10); ok || err != nil {
		t.Errorf("autogroups off: lowered %v, %v; want false, nil", ok, err)
	}
	if data, _ := os.ReadFile(autogroup); string(data) != "/autogroup-1 nice 0\n" {
		t.Errorf("autogroups off: the file became %q", data)
	}
	if ok, err := lowerSession(filepath.Join(dir, "missing"), filepath.Join(dir, "missing-too"), 10); ok || err != nil {
		t.Errorf("no autogroup file: lowered %v, %v; want false, nil", ok, err)
	}
	if ok, err := lowerSession(dir, enabled+"-missing", 10); ok || err == nil {
		t.Errorf("an autogroup that cannot be written: lowered %v, %v; want an error", ok, err)
	}
}

// TestRunLowered: the child runs in a session of its own (its session id is its pid) with the
// nice value in its environment and this command's streams; its exit code comes back as an
// exitCode; an interrupt of this command (its context ending) reaches it as SIGINT.
func TestRunLowered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out strings.Builder
	// Field 6 of /proc/PID/stat is the session id (the command name, field 2, is "sh").
	script := `read -r _ _ _ _ _ sid _ < /proc/$$/stat; echo "sid=$sid pid=$$ nice=$` + envLowered + `"; exit 3`
	err := runLowered(ctx, []string{"sh", "-c", script}, 7, nil, &out, io.Discard)
	var code exitCode
	if !errors.As(err, &code) || code != 3 {
		t.Fatalf("runLowered: %v, want exit status 3", err)
	}
	f := strings.Fields(out.String())
	if len(f) != 3 || strings.TrimPrefix(f[0], "sid=") != strings.TrimPrefix(f[1], "pid=") || f[2] != "nice=7" {
		t.Errorf("the child printed %q: want its own session (sid = pid) and nice=7", out.String())
	}
	if strings.TrimPrefix(f[0], "sid=") == strconv.Itoa(os.Getpid()) {
		t.Errorf("the child is in the test's session")
	}

	// An interrupt is passed on: the child says so and exits 0.
	ictx, interrupt := context.WithCancel(ctx)
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- runLowered(ictx, []string{"sh", "-c", `trap 'echo interrupted; exit 0' INT; echo ready; while :; do sleep 0.1; done`}, 7, nil, w, io.Discard)
		_ = w.Close()
	}()
	lines := bufio.NewScanner(r)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("the child did not start: %q", lines.Text())
	}
	interrupt()
	if !lines.Scan() || lines.Text() != "interrupted" {
		t.Errorf("after the interrupt the child printed %q, want interrupted", lines.Text())
	}
	go func() { _, _ = io.Copy(io.Discard, r) }()
	if err := <-done; err != nil {
		t.Errorf("an interrupted child that exits 0: %v", err)
	}
}

// TestBenchRunsItselfLowered: `bench registration --nodes-nice` runs itself again in a session of
// its own, which lowers its own scheduling group and then goes on as the command (here it stops
// at the kubeconfig, which does not exist); the caller's group keeps its priority, and the
// child's failure is the caller's exit code, printed once.
func TestBenchRunsItselfLowered(t *testing.T) {
	// Without autogroups (no file, or switched off) the child must say the flag has no effect.
	before, err := os.ReadFile(autogroupFile)
	on, _ := os.ReadFile(autogroupEnabled)
	autogroups := err == nil && strings.TrimSpace(string(on)) != "0"
	t.Setenv("CDPLANE_TEST_MAIN", "1")
	code, _, stderr := run(t, "", "bench", "registration", "--nodes", "1", "--nodes-nice", "5", "--kubeconfig", "{missing}")
	if code != 1 || strings.Count(stderr, "cdplane: ") != 1 || !strings.Contains(stderr, "missing") {
		t.Errorf("exit %d, stderr %q: want 1 and the child's one error about the missing kubeconfig", code, stderr)
	}
	if !autogroups {
		if !strings.Contains(stderr, "schedules without autogroups") {
			t.Errorf("stderr %q: without autogroups the child did not say the flag has no effect", stderr)
		}
		return
	}
	if !strings.Contains(stderr, "run at nice 5") {
		t.Errorf("stderr %q: the child did not say it lowered its group", stderr)
	}
	if after, err := os.ReadFile(autogroupFile); err != nil || string(after) != string(before) {
		t.Errorf("this process's autogroup went from %q to %q (%v)", before, after, err)
	}
}
