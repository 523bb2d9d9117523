package controlplane

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// processState is what a recorded PID is now.
type processState int

const (
	// exited: no process has the PID, or only a zombie.
	exited processState = iota
	// running: the recorded process, same start time and command line.
	running
	// reused: another process has the PID (another start time or command line).
	reused
)

// identity is the result of identify; detail says what differs when the PID was reused.
type identity struct {
	state  processState
	detail string
}

// ReusedPIDError says that a recorded PID now belongs to another process, which was therefore
// not signalled: the recorded process exited and the kernel gave its PID to a later one.
type ReusedPIDError struct {
	Process Process
	Detail  string
}

func (e *ReusedPIDError) Error() string {
	return fmt.Sprintf("%s (pid %d) is no longer running: the PID now belongs to another process (%s); not signalling it",
		e.Process.Name, e.Process.PID, e.Detail)
}

// procStat is what identify reads of /proc/<pid>/stat.
type procStat struct {
	state     string
	startTime uint64
}

// readStat reads the state (field 3) and start time (field 22, clock ticks after boot) of pid.
// The command name (field 2) is in parentheses and may hold spaces and parentheses, so fields
// are counted after its last ')'.
func readStat(pid int) (procStat, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	return parseStat(data)
}

func parseStat(data []byte) (procStat, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("malformed /proc stat %q", data)
	}
	f := strings.Fields(string(data[i+1:]))
	// f[0] is field 3 (state), so field 22 (starttime) is f[19].
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("malformed /proc stat %q: %d fields after the command", data, len(f))
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("malformed start time in /proc stat: %w", err)
	}
	return procStat{state: f[0], startTime: start}, nil
}

// cmdline is the /proc/<pid>/cmdline of a process started as binary with args.
func cmdline(binary string, args []string) string {
	var b strings.Builder
	for _, a := range append([]string{binary}, args...) {
		b.WriteString(a)
		b.WriteByte(0)
	}
	return b.String()
}

// identify tells whether p's PID is still the process that was recorded: alive (not a
// zombie), with the recorded start time (when recorded) and exactly the recorded command line.
func identify(p Process) identity {
	if p.PID <= 0 {
		return identity{state: exited}
	}
	st, err := readStat(p.PID)
	if err != nil || st.state == "Z" {
		return identity{state: exited}
	}
	if p.StartTime != 0 && st.startTime != p.StartTime {
		return identity{state: reused, detail: fmt.Sprintf("started at tick %d after boot, not %d as recorded", st.startTime, p.StartTime)}
	}
	got, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.PID))
	if err != nil {
		return identity{state: exited}
	}
	if want := cmdline(p.Binary, p.Args); string(got) != want {
		return identity{state: reused, detail: fmt.Sprintf("command line %q, not %q as recorded",
			strings.ReplaceAll(strings.TrimSuffix(string(got), "\x00"), "\x00", " "),
			strings.ReplaceAll(strings.TrimSuffix(want, "\x00"), "\x00", " "))}
	}
	return identity{state: running}
}
