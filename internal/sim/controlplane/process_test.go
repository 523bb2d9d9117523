package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cdplane/internal/testutil"
)

func TestStopOrder(t *testing.T) {
	names := func(ps []Process) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	procs := func(names ...string) []Process {
		var out []Process
		for _, n := range names {
			out = append(out, Process{Name: n})
		}
		return out
	}
	cases := map[string]struct {
		in   []Process
		want []string
	}{
		"start order reversed": {
			in:   procs("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"),
			want: []string{"kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"},
		},
		"etcd last whatever its place": {
			in:   procs("kube-apiserver", "etcd", "sim-kubelet"),
			want: []string{"sim-kubelet", "kube-apiserver", "etcd"},
		},
		"none": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, names(stopOrder(tc.in))); diff != "" {
				t.Errorf("stop order (-want +got):\n%s", diff)
			}
		})
	}
}

// A started process is alive until stopped; restarted, it runs again under a new PID with the
// same command and log; one that ignores SIGTERM is killed after the timeout.
func TestProcessLifecycle(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "p.log")
	p, err := startProcess(Process{Name: "looper", Binary: "/bin/sh", Log: log, Attached: true, Args: []string{"-c", "echo started; sleep 60 & wait"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Stop([]Process{p}, time.Second) })
	if !Alive(p) {
		t.Fatal("not alive right after start")
	}
	if Alive(Process{Name: "other binary", PID: p.PID, Binary: "/bin/other"}) {
		t.Error("a PID running another binary counts as alive")
	}
	waitLines(t, log, "started", 1)
	np, err := Restart(p, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Stop([]Process{np}, time.Second) })
	if Alive(p) {
		t.Error("the old process still runs after Restart")
	}
	if !Alive(np) || np.PID == p.PID || !np.Attached || np.Log != log || !cmp.Equal(np.Args, p.Args) {
		t.Errorf("restarted process %+v (alive %v), was %+v", np, Alive(np), p)
	}
	waitLines(t, log, "started", 2) // the restarted process appends to the same log
	if err := Stop([]Process{np}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if Alive(np) {
		t.Error("alive after Stop")
	}

	stubborn, err := startProcess(Process{Name: "stubborn", Binary: "/bin/sh", Log: log, Attached: true, Args: []string{"-c", `trap "" TERM; echo trapped; sleep 60 & wait`}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Stop([]Process{stubborn}, time.Second) })
	waitLines(t, log, "trapped", 1)
	start := time.Now()
	if err := Stop([]Process{stubborn}, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if Alive(stubborn) {
		t.Error("a process ignoring SIGTERM survived Stop")
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("killed after %s, before the timeout", d)
	}
}

// A descriptor this process inherited without close-on-exec (flock(1)'s lock, say) does not
// reach the processes it starts, which would hold it until `sim down`.
func TestStartedProcessInheritsNoStrayDescriptor(t *testing.T) {
	const stray = 100
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Dup3(int(f.Fd()), stray, 0); err != nil { // no O_CLOEXEC
		t.Fatal(err)
	}
	defer func() { _ = syscall.Close(stray) }()
	log := filepath.Join(t.TempDir(), "p.log")
	p, err := startProcess(Process{Name: "fds", Binary: "/bin/sh", Log: log, Attached: true,
		Args: []string{"-c", fmt.Sprintf(`if [ -e /proc/$$/fd/%d ]; then echo inherited; else echo clean; fi`, stray)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Stop([]Process{p}, time.Second) })
	testutil.Eventually(t, 10*time.Second, "the child to report", func() (bool, error) {
		data, err := os.ReadFile(log)
		if err != nil {
			return false, fmt.Errorf("reading the log: %w", err)
		}
		return len(data) > 0, fmt.Errorf("the log holds %q", data)
	})
	if data, _ := os.ReadFile(log); string(data) != "clean\n" {
		t.Errorf("the child says %q: it inherited descriptor %d", data, stray)
	}
}

// waitLines waits until log holds n lines that read line.
func waitLines(t *testing.T, log, line string, n int) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("%d lines %q in the log", n, line), func() (bool, error) {
		data, err := os.ReadFile(log)
		if err != nil {
			return false, fmt.Errorf("reading the log: %w", err)
		}
		return strings.Count(string(data), line+"\n") == n, fmt.Errorf("the log holds %q", data)
	})
}

func TestTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("a\nb\nc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := Tail(path, 2); got != "b\nc" {
		t.Errorf("Tail = %q", got)
	}
	if got := Tail(filepath.Join(t.TempDir(), "none"), 2); !strings.Contains(got, "cannot read log") {
		t.Errorf("Tail of a missing file = %q", got)
	}
}
