package kubelet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// podWorker runs one pod on one node.
type podWorker struct {
	k      *Kubelet
	n      *node
	uid    types.UID
	key    types.NamespacedName
	dir    string // <nodeDir>/var/lib/kubelet/pods/<uid>
	logDir string // <nodeDir>/var/log/pods/<ns>_<name>_<uid>
	kick   chan struct{}
	status chan struct{}
	tokens *podTokens

	mu         sync.Mutex
	pod        *corev1.Pod
	gone       bool
	ip         netip.Addr // allocated here; invalid for host-network pods
	podIP      string
	volumes    map[string]string
	saDir      string
	kubeconfig string
	claims     []*preparedClaim
	ctrs       []*ctr
	sandbox    bool
	initDone   bool
	stopped    bool // containers stopped for termination
	startTime  *metav1.Time

	statusMu sync.Mutex
	// statusRetry is the wait before the status write that failed last is tried again
	// (statusMu): doubling from a second to statusRetryMax, reset by a write that succeeds.
	statusRetry time.Duration
}

func newPodWorker(k *Kubelet, n *node, pod *corev1.Pod) *podWorker {
	w := &podWorker{
		k: k, n: n, uid: pod.UID, key: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name},
		dir:    filepath.Join(n.dir, "var/lib/kubelet/pods", string(pod.UID)),
		logDir: filepath.Join(n.dir, "var/log/pods", pod.Namespace+"_"+pod.Name+"_"+string(pod.UID)),
		kick:   make(chan struct{}, 1), status: make(chan struct{}, 1),
		pod: pod.DeepCopy(),
	}
	w.tokens = &podTokens{client: k.client, pod: w.pod}
	for _, c := range pod.Spec.InitContainers {
		w.ctrs = append(w.ctrs, newCtr(w, c, true))
	}
	for _, c := range pod.Spec.Containers {
		w.ctrs = append(w.ctrs, newCtr(w, c, false))
	}
	return w
}

// update records a newer copy of the pod (or that it is gone from the API) and wakes the
// worker. A copy older than the one held (the worker's own status write) is ignored.
func (w *podWorker) update(pod *corev1.Pod, gone bool) {
	w.mu.Lock()
	if gone {
		w.gone = true
	} else if newerOrSame(pod.ResourceVersion, w.pod.ResourceVersion) {
		w.pod = pod.DeepCopy()
	}
	w.mu.Unlock()
	w.wake()
}

func newerOrSame(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	if err1 != nil || err2 != nil {
		return true
	}
	return x >= y
}

// wake tells the worker's loop and its status writer that something changed.
func (w *podWorker) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
	select {
	case w.status <- struct{}{}:
	default:
	}
}

func (w *podWorker) currentPod() *corev1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod
}

func (w *podWorker) restartPolicy() corev1.RestartPolicy { return w.currentPod().Spec.RestartPolicy }

func (w *podWorker) addresses() podAddresses {
	w.mu.Lock()
	defer w.mu.Unlock()
	return podAddresses{PodIP: w.podIP, HostIP: w.n.ip.String()}
}

// terminating says whether the pod is to stop: deleted (gracefully or not) from the API.
func (w *podWorker) terminating() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gone || w.pod.DeletionTimestamp != nil
}

// waitFor waits until cond holds (true), or until the pod is to terminate or ctx ends (false).
func (w *podWorker) waitFor(ctx context.Context, cond func() bool) bool {
	for {
		if w.terminating() || ctx.Err() != nil {
			return false
		}
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
		case <-w.kick:
		}
	}
}

// retry runs f until it succeeds (true), backing off between failures, or until the pod is to
// terminate or ctx ends (false). onErr sees each failure. The delays are b's steps, at most 2s
// while claims are not ready yet (errNotReady); a kick wakes it early.
func (w *podWorker) retry(ctx context.Context, b wait.Backoff, f func() error, onErr func(error)) bool {
	for {
		if w.terminating() || ctx.Err() != nil {
			return false
		}
		err := f()
		if err == nil {
			return true
		}
		onErr(err)
		delay := b.Step()
		if errors.Is(err, errNotReady) {
			delay = min(delay, 2*time.Second)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-w.kick:
		}
		t.Stop()
	}
}

func (w *podWorker) run(ctx context.Context) {
	defer w.k.workerWG.Done()
	defer w.k.removeWorker(w.uid)
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(w.key.Namespace, w.key.Name), "node", w.n.spec.Name)
	ctx = klog.NewContext(ctx, logger)
	podCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go w.statusLoop(podCtx)

	// A pod that finished before this kubelet saw it (it is being deleted) runs nothing.
	if !isTerminal(w.currentPod()) && w.start(podCtx) {
		if w.waitFor(podCtx, w.finished) {
			// Completed (Succeeded or Failed): resources go back now, the object stays until
			// it is deleted.
			w.syncStatus(podCtx)
			w.release(podCtx)
			w.waitFor(podCtx, func() bool { return false })
		}
	}
	if ctx.Err() != nil {
		w.killAll()
		w.waitContainers()
		return
	}
	w.terminate(ctx)
}

// start sets the pod up and starts its containers; false when the pod is to terminate first.
func (w *podWorker) start(ctx context.Context) bool {
	logger := klog.FromContext(ctx)
	pod := w.currentPod()
	if !w.retry(ctx, w.k.cfg.PrepareBackoff, func() error { return w.setup(ctx) }, func(err error) {
		w.n.recorder.Eventf(w.currentPod(), corev1.EventTypeWarning, "FailedMount", "Setting the pod up: %v", err)
	}) {
		return false
	}
	w.wake()
	if len(pod.Spec.ResourceClaims) > 0 {
		ok := w.retry(ctx, w.k.cfg.PrepareBackoff, func() error { return w.prepare(ctx) }, func(err error) {
			if errors.Is(err, errNotReady) {
				logger.V(2).Info("Waiting for resource claims", "reason", err.Error())
				return
			}
			w.n.recorder.Eventf(w.currentPod(), corev1.EventTypeWarning, "FailedPrepareDynamicResources",
				"Failed to prepare dynamic resources: %v", err)
		})
		if !ok {
			return false
		}
	}
	for _, c := range w.ctrs {
		if !c.init {
			continue
		}
		w.startCtr(ctx, c)
		done := func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.sidecar {
				return c.started || c.finished
			}
			return c.finished
		}
		if !w.waitFor(ctx, done) {
			return false
		}
		if w.initFailed() {
			return true
		}
	}
	w.mu.Lock()
	w.initDone = true
	w.mu.Unlock()
	for _, c := range w.ctrs {
		if !c.init {
			w.startCtr(ctx, c)
		}
	}
	w.wake()
	return true
}

func (w *podWorker) startCtr(ctx context.Context, c *ctr) {
	c.running = true
	go c.supervise(ctx)
}

// setup allocates the pod's address and makes its directories, volumes and credentials.
func (w *podWorker) setup(ctx context.Context) error {
	pod := w.currentPod()
	w.mu.Lock()
	if w.podIP == "" {
		if pod.Spec.HostNetwork {
			w.podIP = w.n.ip.String()
		} else {
			ip, err := w.k.ips.Allocate()
			if err != nil {
				w.mu.Unlock()
				return err
			}
			w.ip, w.podIP = ip, ip.String()
		}
		now := metav1.Now()
		w.startTime = &now
	}
	w.mu.Unlock()
	for _, d := range []string{w.dir, w.logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := w.writeHostsFile(pod); err != nil {
		return err
	}
	if err := w.writeResolvConf(pod); err != nil {
		return err
	}
	saDir, kubeconfig, err := w.setupCredentials(ctx, pod)
	if err != nil {
		return err
	}
	volumes, err := w.setupVolumes(ctx, pod)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.saDir, w.kubeconfig, w.volumes, w.sandbox = saDir, kubeconfig, volumes, true
	w.mu.Unlock()
	if saDir != "" {
		go w.tokens.renew(ctx)
	}
	return nil
}

// prepare prepares the pod's claims and resolves each container's CDI edits.
func (w *podWorker) prepare(ctx context.Context) error {
	claims, err := w.prepareClaims(ctx, w.currentPod())
	w.mu.Lock()
	if claims != nil {
		w.claims = claims
	}
	w.mu.Unlock()
	if err != nil {
		return err
	}
	for _, c := range w.ctrs {
		edits, err := w.n.cdi.resolve(containerCDIDevices(&c.c, claims))
		if err != nil {
			return err
		}
		c.edits = applyCDIEdits(w.n.dir, edits)
	}
	return nil
}

// initFailed says whether an init container failed for good.
func (w *podWorker) initFailed() bool {
	for _, c := range w.ctrs {
		if !c.init || c.sidecar {
			continue
		}
		c.mu.Lock()
		failed := c.finished && c.state.Terminated != nil && c.state.Terminated.ExitCode != 0
		c.mu.Unlock()
		if failed {
			return true
		}
	}
	return false
}

// finished says whether the pod reached Succeeded or Failed.
func (w *podWorker) finished() bool {
	p := w.phase()
	return p == corev1.PodSucceeded || p == corev1.PodFailed
}

// release unprepares the pod's claims (those no other pod of the node uses), retrying until it
// succeeds or ctx ends.
func (w *podWorker) release(ctx context.Context) {
	w.mu.Lock()
	claims := w.claims
	w.claims = nil
	w.mu.Unlock()
	if len(claims) == 0 {
		return
	}
	todo := w.n.releaseClaims(w.uid, claims)
	if len(todo) == 0 {
		return
	}
	backoff := w.k.cfg.PrepareBackoff
	for ctx.Err() == nil {
		err := w.unprepareClaims(ctx, todo)
		if err == nil {
			return
		}
		klog.FromContext(ctx).Error(err, "Unpreparing resource claims")
		w.n.recorder.Eventf(w.currentPod(), corev1.EventTypeWarning, "FailedUnprepareDynamicResources", "%v", err)
		t := time.NewTimer(backoff.Step())
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// terminate stops the pod's containers (SIGTERM, then SIGKILL once the grace period is over;
// at once when the pod is gone from the API), writes its final status, unprepares its claims,
// deletes it from the API (grace 0, UID precondition) and frees its address and directories.
func (w *podWorker) terminate(ctx context.Context) {
	logger := klog.FromContext(ctx)
	w.mu.Lock()
	pod, gone := w.pod, w.gone
	w.stopped = true
	w.mu.Unlock()
	grace := time.Duration(0)
	if !gone {
		switch {
		case pod.DeletionGracePeriodSeconds != nil:
			grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
		case pod.Spec.TerminationGracePeriodSeconds != nil:
			grace = time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
		default:
			grace = 30 * time.Second
		}
	}
	logger.V(1).Info("Terminating pod", "grace", grace, "gone", gone)
	deadline := time.Now().Add(grace)
	for _, c := range w.ctrs {
		c.requestStop()
	}
	// Regular containers first, then sidecars, as the kubelet does.
	w.stopCtrs(func(c *ctr) bool { return !c.init }, deadline)
	w.stopCtrs(func(c *ctr) bool { return c.init }, deadline)
	w.waitContainers()
	if !gone {
		w.syncStatus(ctx)
	}
	w.release(ctx)
	// Address and directories go before the object: once it is gone from the API, nothing of
	// the pod is left on the node.
	w.cleanup()
	if !gone {
		err := w.k.client.CoreV1().Pods(w.key.Namespace).Delete(ctx, w.key.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To(int64(0)), Preconditions: &metav1.Preconditions{UID: &w.uid},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
			logger.Error(err, "Deleting the pod")
		}
	}
	logger.V(1).Info("Pod removed")
}

// stopCtrs sends SIGTERM to the selected running containers and kills those still running at
// the deadline.
func (w *podWorker) stopCtrs(sel func(*ctr) bool, deadline time.Time) {
	var cs []*ctr
	for _, c := range w.ctrs {
		if sel(c) && c.running {
			cs = append(cs, c)
			if time.Now().Before(deadline) {
				c.signal(syscall.SIGTERM)
			} else {
				c.kill()
			}
		}
	}
	for _, c := range cs {
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-c.exited:
		case <-t.C:
			c.kill()
			<-c.exited
		}
		t.Stop()
	}
}

// killAll kills every container at once (the kubelet is stopping).
func (w *podWorker) killAll() {
	for _, c := range w.ctrs {
		c.requestStop()
		c.kill()
	}
}

func (w *podWorker) waitContainers() {
	for _, c := range w.ctrs {
		if c.running {
			<-c.exited
		}
	}
}

func (w *podWorker) cleanup() {
	w.mu.Lock()
	ip := w.ip
	w.ip = netip.Addr{}
	w.mu.Unlock()
	if ip.IsValid() {
		w.k.ips.Release(ip)
	}
	_ = os.RemoveAll(w.dir)
	_ = os.RemoveAll(w.logDir)
}

// logFile finds a container's log for the log endpoint.
func (w *podWorker) logFile(container string, previous bool) (string, <-chan struct{}, error) {
	for _, c := range w.ctrs {
		if c.c.Name == container {
			return c.logFile(previous)
		}
	}
	return "", nil, fmt.Errorf("container %q not found in pod %s", container, w.key)
}
