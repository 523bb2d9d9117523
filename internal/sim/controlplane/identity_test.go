package controlplane

import (
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseStat(t *testing.T) {
	// Fields 3 to 22 of a real stat line; the start time is the last of them.
	const tail = " S 1 1234 1234 0 -1 4194560 107 0 0 0 0 0 0 0 20 0 1 0 98765 1234567 89"
	cases := map[string]struct {
		in      string
		want    procStat
		wantErr bool
	}{
		"plain":                             {in: "1234 (sleep)" + tail, want: procStat{state: "S", startTime: 98765}},
		"command with spaces and brackets":  {in: "1234 (a) b (c) d)" + tail, want: procStat{state: "S", startTime: 98765}},
		"zombie":                            {in: "1234 (x) Z" + tail[2:], want: procStat{state: "Z", startTime: 98765}},
		"no command":                        {in: "1234 sleep S 1", wantErr: true},
		"cut short":                         {in: "1234 (sleep) S 1 1234", wantErr: true},
		"start time not a number":           {in: "1234 (sleep)" + strings.Replace(tail, "98765", "x", 1), wantErr: true},
		"empty (the process is being read)": {in: "", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := parseStat([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want one: %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(procStat{})); !tc.wantErr && diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// A record whose start time or command line is not the process's now is a reused PID: Stop does
// not signal it and says so with a *ReusedPIDError. The test owns the child's exit status: had
// anything signalled the child, it would have died of SIGTERM before the test's SIGKILL.
func TestStopLeavesAReusedPIDAlone(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatalf("no sleep binary on PATH (coreutils): %v", err)
	}
	cmd := exec.Command(sleep, "300")
	// Its own process group, as the launcher's processes: Stop signals the group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	rec := Process{Name: "sleeper", PID: cmd.Process.Pid, Binary: sleep, Args: []string{"300"}}
	waitExeced(rec)
	st, err := readStat(rec.PID)
	if err != nil {
		t.Fatal(err)
	}
	rec.StartTime = st.startTime
	if !Alive(rec) {
		t.Fatalf("the recorded process is not alive: %+v", identify(rec))
	}

	legacy := rec
	legacy.StartTime = 0 // state written before start times were recorded: the command line decides
	if !Alive(legacy) {
		t.Error("a record without a start time but with the right command line is not alive")
	}
	stale := map[string]func(*Process){
		"another start time":             func(p *Process) { p.StartTime++ },
		"other arguments":                func(p *Process) { p.Args = []string{"301"} },
		"the binary alone":               func(p *Process) { p.Args = nil },
		"another binary":                 func(p *Process) { p.Binary = "/bin/other" },
		"other arguments, no start time": func(p *Process) { p.StartTime, p.Args = 0, []string{"30"} },
	}
	for name, change := range stale {
		t.Run(name, func(t *testing.T) {
			p := rec
			change(&p)
			if Alive(p) {
				t.Error("alive")
			}
			err := Stop([]Process{p}, time.Second)
			var reusedErr *ReusedPIDError
			if !errors.As(err, &reusedErr) || reusedErr.Process.PID != rec.PID {
				t.Fatalf("Stop: %v, want a *ReusedPIDError for pid %d", err, rec.PID)
			}
			if !strings.Contains(err.Error(), "not signalling it") {
				t.Errorf("error %q does not say it was left alone", err)
			}
		})
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("the child is gone before the test killed it: %v", err)
	}
	<-exited
	var exitErr *exec.ExitError
	if !errors.As(waitErr, &exitErr) {
		t.Fatalf("the child exited with %v", waitErr)
	}
	if ws := exitErr.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("the child ended with %v, not the test's SIGKILL: something signalled it", ws)
	}
	if Alive(rec) {
		t.Error("alive after it exited")
	}
	if err := Stop([]Process{rec}, time.Second); err != nil {
		t.Errorf("Stop of an exited process: %v", err)
	}
}
