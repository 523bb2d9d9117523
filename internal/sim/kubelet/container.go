package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// ctr is one container of a pod and its instances.
type ctr struct {
	w       *podWorker
	c       corev1.Container
	init    bool // an init container (sidecar or not)
	sidecar bool // an init container with restartPolicy Always
	edits   Edits

	stop     chan struct{}
	stopOnce sync.Once
	exited   chan struct{} // closed when the supervisor returns
	running  bool          // the supervisor was started (main goroutine only)

	mu        sync.Mutex
	restarts  int32
	state     corev1.ContainerState
	lastState corev1.ContainerState
	ready     bool
	started   bool
	finished  bool // will not run again
	handle    Handle
	logPath   string
	prevLog   string
	live      <-chan struct{} // Done of the current instance
}

func newCtr(w *podWorker, c corev1.Container, init bool) *ctr {
	sidecar := init && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
	return &ctr{
		w: w, c: c, init: init, sidecar: sidecar,
		stop: make(chan struct{}), exited: make(chan struct{}),
		state: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}},
	}
}

func (c *ctr) requestStop() { c.stopOnce.Do(func() { close(c.stop) }) }

func (c *ctr) stopping() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

// sleep waits d, or less when the container is to stop (false) or ctx ends (false).
func (c *ctr) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.stop:
		return false
	case <-ctx.Done():
		return false
	}
}

// shouldRestart decides whether a container that exited with code runs again: a sidecar
// always; a container with its own restartPolicy by it; an init container when it failed and
// the pod's policy is not Never; other containers by the pod's policy.
func shouldRestart(pod corev1.RestartPolicy, own *corev1.ContainerRestartPolicy, init, sidecar bool, code int) bool {
	if sidecar {
		return true
	}
	if own != nil && !init {
		switch *own {
		case corev1.ContainerRestartPolicyAlways:
			return true
		case corev1.ContainerRestartPolicyOnFailure:
			return code != 0
		case corev1.ContainerRestartPolicyNever:
			return false
		}
	}
	if init {
		return code != 0 && pod != corev1.RestartPolicyNever
	}
	switch pod {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return code != 0
	default:
		return true
	}
}

// supervise runs the container's instances until it finishes for good, is stopped, or ctx
// ends.
func (c *ctr) supervise(ctx context.Context) {
	defer close(c.exited)
	w := c.w
	logger := klog.FromContext(ctx).WithValues("container", c.c.Name)
	backoff := w.k.cfg.RestartBackoff
	for !c.stopping() && ctx.Err() == nil {
		inst, err := w.containerSpec(ctx, c)
		if err == nil {
			inst.handle, err = w.k.runner.Start(ctx, inst.spec)
			if err != nil {
				_ = inst.log.Close()
				err = fmt.Errorf("starting: %w", err)
			}
		}
		if err != nil {
			c.setWaiting("CreateContainerError", err.Error())
			w.n.recorder.Eventf(w.currentPod(), corev1.EventTypeWarning, "Failed", "Container %s: %v", c.c.Name, err)
			logger.V(1).Info("Container did not start", "err", err)
			if !c.sleep(ctx, w.k.cfg.nextRestartDelay(&backoff, 0)) {
				return
			}
			continue
		}
		started := time.Now()
		c.setRunning(inst, started)
		w.n.recorder.Eventf(w.currentPod(), corev1.EventTypeNormal, "Started", "Started container %s", c.c.Name)
		pctx, cancel := context.WithCancel(ctx)
		go c.probe(pctx, inst)
		select {
		case <-inst.handle.Done():
		case <-ctx.Done():
			_ = inst.handle.Kill()
			<-inst.handle.Done()
		}
		cancel()
		_ = inst.log.Close()
		code := inst.handle.ExitCode()
		restart := !c.stopping() && ctx.Err() == nil &&
			shouldRestart(w.restartPolicy(), c.c.RestartPolicy, c.init, c.sidecar, code)
		c.setTerminated(code, started, !restart)
		logger.V(1).Info("Container exited", "exitCode", code, "restart", restart)
		if !restart {
			return
		}
		delay := w.k.cfg.nextRestartDelay(&backoff, time.Since(started))
		c.setWaiting("CrashLoopBackOff", fmt.Sprintf("back-off %s restarting failed container %s", delay, c.c.Name))
		if !c.sleep(ctx, delay) {
			return
		}
		c.mu.Lock()
		c.restarts++
		c.mu.Unlock()
	}
}

// instance is one start of a container.
type instance struct {
	spec   *ContainerSpec
	paths  *PathMap
	env    map[string]string
	log    *os.File
	path   string
	handle Handle
}

// probe runs the instance's startup probe, then its readiness and liveness probes; a failed
// startup or liveness probe kills the instance (the supervisor then restarts it by policy).
func (c *ctr) probe(ctx context.Context, inst *instance) {
	p := &prober{runner: c.w.k.runner, spec: inst.spec, paths: inst.paths, ports: c.c.Ports, minPeriod: c.w.k.cfg.MinProbePeriod,
		minTimeout: c.w.k.cfg.MinProbeTimeout,
		lookup:     func(k string) (string, bool) { v, ok := inst.env[k]; return v, ok }}
	kill := func(what string, err error) {
		c.w.n.recorder.Eventf(c.w.currentPod(), corev1.EventTypeWarning, "Unhealthy", "%s probe of %s failed: %v", what, c.c.Name, err)
		_ = inst.handle.Kill()
	}
	if sp := c.c.StartupProbe; sp != nil {
		passed := false
		p.loop(ctx, sp, func(ok bool, err error) bool {
			if !ok {
				kill("Startup", err)
				return false
			}
			passed = true
			return false
		})
		if !passed {
			return
		}
		c.set(func() { c.started = true })
	}
	if lp := failureFloor(c.c.LivenessProbe, c.w.k.cfg.MinLivenessFailures); lp != nil {
		go p.loop(ctx, lp, func(ok bool, err error) bool {
			if !ok {
				kill("Liveness", err)
				return false
			}
			return true
		})
	}
	if rp := c.c.ReadinessProbe; rp != nil && (!c.init || c.sidecar) {
		p.loop(ctx, rp, func(ok bool, _ error) bool {
			c.set(func() { c.ready = ok })
			return true
		})
		return
	}
	c.set(func() { c.ready = true })
}

// set changes the container's state under its lock and wakes the pod.
func (c *ctr) set(f func()) {
	c.mu.Lock()
	f()
	c.mu.Unlock()
	c.w.wake()
}

func (c *ctr) setWaiting(reason, msg string) {
	c.set(func() {
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
		c.ready, c.started = false, false
	})
}

func (c *ctr) setRunning(inst *instance, at time.Time) {
	c.set(func() {
		c.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(at)}}
		c.handle = inst.handle
		if c.logPath != inst.path {
			c.prevLog, c.logPath = c.logPath, inst.path
		}
		c.live = inst.handle.Done()
		c.started = c.c.StartupProbe == nil
		c.ready = false
	})
}

func (c *ctr) setTerminated(code int, started time.Time, final bool) {
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	c.set(func() {
		t := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: int32(code), Reason: reason, StartedAt: metav1.NewTime(started), FinishedAt: metav1.Now(),
			ContainerID: c.containerID(),
		}}
		c.state, c.lastState = t, t
		c.ready, c.started, c.finished = false, false, final
		c.handle = nil
	})
}

func (c *ctr) containerID() string {
	return "sim://" + string(c.w.uid) + "/" + c.c.Name + "/" + strconv.Itoa(int(c.restarts))
}

// signal sends sig to the running instance, if any.
func (c *ctr) signal(sig os.Signal) {
	c.mu.Lock()
	h := c.handle
	c.mu.Unlock()
	if h != nil {
		_ = h.Signal(sig)
	}
}

func (c *ctr) kill() {
	c.mu.Lock()
	h := c.handle
	c.mu.Unlock()
	if h != nil {
		_ = h.Kill()
	}
}

// logFile returns the log of the current (or previous) instance and, for a running current
// instance, a channel closed when it exits.
func (c *ctr) logFile(previous bool) (string, <-chan struct{}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if previous {
		if c.prevLog == "" {
			return "", nil, fmt.Errorf("previous terminated container %q not found", c.c.Name)
		}
		return c.prevLog, nil, nil
	}
	if c.logPath == "" {
		return "", nil, fmt.Errorf("container %q is waiting to start", c.c.Name)
	}
	if c.handle == nil {
		return c.logPath, nil, nil
	}
	return c.logPath, c.live, nil
}

// logPathFor is where instance n of a container logs, below the node's /var/log/pods.
func (w *podWorker) logPathFor(container string, n int32) string {
	return filepath.Join(w.logDir, container, strconv.Itoa(int(n))+".log")
}
