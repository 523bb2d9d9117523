package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is one started process, as recorded in the simulated cluster's state file.
type Process struct {
	Name   string   `json:"name"`
	PID    int      `json:"pid"`
	Binary string   `json:"binary"`
	Args   []string `json:"args,omitempty"`
	// Dir is the working directory it was started in; empty: the starter's.
	Dir string `json:"dir,omitempty"`
	// StartTime is when it started, in clock ticks after boot (field 22 of /proc/<pid>/stat):
	// with the command line, what tells it from a later process given the same PID. Zero in
	// state written before it was recorded: the command line alone.
	StartTime uint64 `json:"startTime,omitempty"`
	Log       string `json:"log"`
	// Attached: the kernel kills the process when the process that started it exits.
	Attached bool `json:"attached,omitempty"`
}

// StartDetached starts a process in its own session, its output appended to log, and returns
// without waiting for it; it outlives the caller.
func StartDetached(name, binary, log string, args ...string) (Process, error) {
	return startProcess(Process{Name: name, Binary: binary, Log: log, Args: args})
}

// startProcess starts p.Binary with p.Args in p.Dir, in its own session (so that Stop can
// signal its process group), its output appended to p.Log, and returns p with its PID and start
// time. An attached process is killed by the kernel when the thread that started it exits, so
// that a test binary that dies leaves no control plane behind.
func startProcess(p Process) (Process, error) {
	out, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return Process{}, fmt.Errorf("creating the log of %s: %w", p.Name, err)
	}
	defer out.Close()
	closeStrayOnExec()
	cmd := exec.Command(p.Binary, p.Args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = p.Dir, out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if p.Attached {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return Process{}, fmt.Errorf("starting %s: %w", p.Name, err)
	}
	p.PID, p.StartTime = cmd.Process.Pid, 0
	// Reap it if it exits while this process still runs; Stop and `sim down` find it by PID.
	// Until then the PID cannot be reused, so the start time read below is this process's.
	go func() { _ = cmd.Wait() }()
	waitExeced(p)
	if st, err := readStat(p.PID); err == nil {
		p.StartTime = st.startTime
	}
	return p, nil
}

// closeStrayOnExec marks every descriptor of this process above stderr close-on-exec, so that
// what it starts inherits its standard streams only. Go opens its own descriptors so, but one
// this process inherited without the flag (flock(1)'s lock, a CI runner's pipe) would stay
// open, and a lock held, in every process of the cluster until `sim down`.
func closeStrayOnExec() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// waitExeced waits (up to a second) until the kernel shows p's command line: for a moment
// after exec returns to the parent it is empty, and Alive would say p is not running.
func waitExeced(p Process) {
	for i := 0; i < 1000; i++ {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.PID))
		if err != nil || len(cmdline) > 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// Restart stops p and starts it again the same way, with the same binary, arguments and log,
// returning the new process.
func Restart(p Process, timeout time.Duration) (Process, error) {
	if err := Stop([]Process{p}, timeout); err != nil {
		return Process{}, err
	}
	return startProcess(p)
}

// Alive reports whether p still runs: its PID is a live process with the recorded start time
// and command line (a PID reused by another process does not count).
func Alive(p Process) bool {
	return identify(p).state == running
}

// Stop stops processes in reverse start order, etcd last whatever its place (an apiserver
// whose etcd went first can hang in its shutdown): SIGTERM to each one's process group, then
// SIGKILL if it still runs after timeout. Only processes that are still the recorded ones
// (PID, start time and command line) are signalled; one whose PID now belongs to another
// process is left alone and reported as a *ReusedPIDError in the returned error.
func Stop(procs []Process, timeout time.Duration) error {
	var errs []error
	for _, p := range stopOrder(procs) {
		switch id := identify(p); id.state {
		case exited:
			continue
		case reused:
			errs = append(errs, &ReusedPIDError{Process: p, Detail: id.detail})
			continue
		}
		_ = syscall.Kill(-p.PID, syscall.SIGTERM)
		deadline := time.Now().Add(timeout)
		for Alive(p) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if Alive(p) {
			_ = syscall.Kill(-p.PID, syscall.SIGKILL)
			for j := 0; Alive(p) && j < 50; j++ {
				time.Sleep(100 * time.Millisecond)
			}
			if Alive(p) {
				errs = append(errs, fmt.Errorf("%s (pid %d) did not stop", p.Name, p.PID))
			}
		}
	}
	return errors.Join(errs...)
}

// stopOrder is procs in reverse order with etcd moved last.
func stopOrder(procs []Process) []Process {
	var out, etcd []Process
	for i := len(procs) - 1; i >= 0; i-- {
		if procs[i].Name == "etcd" {
			etcd = append(etcd, procs[i])
		} else {
			out = append(out, procs[i])
		}
	}
	return append(out, etcd...)
}

// waitHealthy polls url until it answers 200, p exits, timeout passes or ctx ends; the error
// names p and ends with the tail of its log.
func waitHealthy(ctx context.Context, p Process, url string, c *http.Client, timeout time.Duration) error {
	if c == nil {
		c = &http.Client{Timeout: 5 * time.Second}
	}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := c.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if !Alive(p) {
			return fmt.Errorf("%s exited; its log (%s) ends with:\n%s", p.Name, p.Log, Tail(p.Log, 30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not healthy at %s after %s; its log (%s) ends with:\n%s", p.Name, url, timeout, p.Log, Tail(p.Log, 30))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", p.Name, ctx.Err())
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// Tail returns the last n lines of a file, or a note saying why it could not be read.
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freePorts returns n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
