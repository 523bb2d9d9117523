package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
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
	Log    string   `json:"log"`
	// Attached: the kernel kills the process when the process that started it exits.
	Attached bool `json:"attached,omitempty"`
}

// StartDetached starts a process in its own session, its output appended to log, and returns
// without waiting for it; it outlives the caller.
func StartDetached(name, binary, log string, args ...string) (Process, error) {
	return startProcess(name, binary, log, false, args...)
}

// startProcess starts binary in its own session (so that Stop can signal its process group),
// its output appended to log. An attached process is killed by the kernel when the thread that
// started it exits, so that a test binary that dies leaves no control plane behind.
func startProcess(name, binary, log string, attached bool, args ...string) (Process, error) {
	out, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return Process{}, fmt.Errorf("creating the log of %s: %w", name, err)
	}
	defer out.Close()
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if attached {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return Process{}, fmt.Errorf("starting %s: %w", name, err)
	}
	proc := Process{Name: name, PID: cmd.Process.Pid, Binary: binary, Args: args, Log: log, Attached: attached}
	// Reap it if it exits while this process still runs; Stop and `sim down` find it by PID.
	go func() { _ = cmd.Wait() }()
	waitExeced(proc)
	return proc, nil
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
	return startProcess(p.Name, p.Binary, p.Log, p.Attached, p.Args...)
}

// Alive reports whether the process still runs the binary it was started with (a PID reused
// by another program does not count).
func Alive(p Process) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.PID))
	if err != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID))
	if err == nil {
		// A zombie has exited.
		if f := strings.Fields(string(stat)); len(f) > 2 && f[2] == "Z" {
			return false
		}
	}
	return strings.HasPrefix(string(cmdline), p.Binary+"\x00") || string(cmdline) == p.Binary
}

// Stop stops processes in reverse start order, etcd last whatever its place (an apiserver
// whose etcd went first can hang in its shutdown): SIGTERM to each one's process group, then
// SIGKILL if it still runs after timeout. Only processes that still run their recorded binary
// are signalled.
func Stop(procs []Process, timeout time.Duration) error {
	var errs []error
	for _, p := range stopOrder(procs) {
		if !Alive(p) {
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
