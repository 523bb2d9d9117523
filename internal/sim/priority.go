package sim

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"syscall"
)

// KubeletNice is the nice value of the simulated-kubelet processes. They stand for thousands
// of machines of their own, but here share the cores with the control plane. Each runs in a
// session of its own (it is started detached), which Linux schedules as an autogroup of its own,
// each autogroup weighing the same: under a burst the kubelet processes, outnumbering the
// control plane's, took most of the cores, kube-scheduler bound pods far slower than they came,
// and every component's requests were throttled (429) behind the kubelets'. At nice 10 the
// control plane goes first and the kubelets take what is left (see docs/scale.md, "Design
// choices and what was measured").
const KubeletNice = 10

// lowerPriority gives this process KubeletNice: its session's autogroup (its weight against the
// control plane's processes, each in a session of its own) and every thread (the weight where
// autogroups do not apply: autogroup off, or a CPU cgroup); threads started later inherit it.
// Raising one's own nice value needs no privilege. autogroup is the file of the process's
// autogroup (/proc/self/autogroup; absent where the kernel has none).
func lowerPriority(autogroup string) error {
	var errs []error
	if err := os.WriteFile(autogroup, []byte(strconv.Itoa(KubeletNice)), 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("autogroup: %w", err))
	}
	// Twice: a thread started by one not yet lowered, while the first pass ran, is caught by
	// the second.
	for range 2 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("threads: %w", err))...)
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, KubeletNice); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("thread %d: %w", tid, err))
			}
		}
	}
	return errors.Join(errs...)
}
