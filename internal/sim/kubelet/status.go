package kubelet

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// ctrSummary is what the pod phase depends on for one regular container.
type ctrSummary struct {
	running    bool
	terminated bool // its last instance exited
	finished   bool // terminated and will not run again
	exitCode   int32
}

// podPhase computes the phase: Failed when an init container failed for good; Pending until
// the init containers are done and while no regular container has started; Succeeded or
// Failed once every regular container finished for good (Failed if one exited non-zero);
// Running otherwise.
func podPhase(initFailed, initDone bool, ctrs []ctrSummary) corev1.PodPhase {
	if initFailed {
		return corev1.PodFailed
	}
	if !initDone {
		return corev1.PodPending
	}
	all, failed, everRan := true, false, false
	for _, c := range ctrs {
		if c.running || c.terminated || c.finished {
			everRan = true
		}
		if !c.finished {
			all = false
		} else if c.exitCode != 0 {
			failed = true
		}
	}
	switch {
	case len(ctrs) > 0 && all && failed:
		return corev1.PodFailed
	case len(ctrs) > 0 && all:
		return corev1.PodSucceeded
	case !everRan:
		return corev1.PodPending
	}
	return corev1.PodRunning
}

// phase is the pod's phase now. Once its containers were stopped for termination every
// container counts as finished.
func (w *podWorker) phase() corev1.PodPhase {
	w.mu.Lock()
	initDone, stopped := w.initDone, w.stopped
	w.mu.Unlock()
	var sums []ctrSummary
	for _, c := range w.ctrs {
		if c.init {
			continue
		}
		c.mu.Lock()
		s := ctrSummary{running: c.state.Running != nil, finished: c.finished || stopped}
		if t := c.lastState.Terminated; t != nil {
			s.terminated, s.exitCode = true, t.ExitCode
		}
		c.mu.Unlock()
		sums = append(sums, s)
	}
	return podPhase(w.initFailed(), initDone, sums)
}

func (c *ctr) status() corev1.ContainerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := corev1.ContainerStatus{
		Name: c.c.Name, Image: c.c.Image, ImageID: "sim://" + c.c.Image,
		State: *c.state.DeepCopy(), LastTerminationState: *c.lastState.DeepCopy(),
		Ready: c.ready, RestartCount: c.restarts, Started: ptr.To(c.started),
	}
	if c.state.Running != nil || c.state.Terminated != nil {
		s.ContainerID = c.containerID()
	}
	if c.state.Running == nil && c.lastState.Terminated != nil && s.State.Terminated != nil {
		// The current state is the last termination: no previous one to show.
		s.LastTerminationState = corev1.ContainerState{}
	}
	return s
}

// buildStatus is the pod's status as this kubelet sees it, on top of the status fields others
// own (conditions of other writers, resource claim statuses, QoS class).
func (w *podWorker) buildStatus(old corev1.PodStatus) corev1.PodStatus {
	now := metav1.Now()
	s := *old.DeepCopy()
	w.mu.Lock()
	sandbox, initDone := w.sandbox, w.initDone
	s.HostIP, s.PodIP = w.n.ip.String(), w.podIP
	if w.startTime != nil && s.StartTime == nil {
		s.StartTime = w.startTime
	}
	w.mu.Unlock()
	s.HostIPs = []corev1.HostIP{{IP: s.HostIP}}
	if s.PodIP != "" {
		s.PodIPs = []corev1.PodIP{{IP: s.PodIP}}
	}
	s.Phase = w.phase()
	s.InitContainerStatuses, s.ContainerStatuses = nil, nil
	allReady, initReady := true, true
	for _, c := range w.ctrs {
		cs := c.status()
		if c.init {
			s.InitContainerStatuses = append(s.InitContainerStatuses, cs)
			if c.sidecar && !cs.Ready {
				initReady = false
			}
			continue
		}
		s.ContainerStatuses = append(s.ContainerStatuses, cs)
		if !cs.Ready {
			allReady = false
		}
	}
	containersReady := allReady && initReady && initDone && s.Phase == corev1.PodRunning
	ready := containersReady && readinessGatesPass(w.currentPod(), s.Conditions)
	set := func(t corev1.PodConditionType, ok bool, reason string) {
		setCondition(&s.Conditions, t, ok, reason, now)
	}
	if findCondition(s.Conditions, corev1.PodScheduled) < 0 {
		set(corev1.PodScheduled, true, "")
	}
	set(corev1.PodReadyToStartContainers, sandbox && s.Phase != corev1.PodSucceeded && s.Phase != corev1.PodFailed, "")
	set(corev1.PodInitialized, initDone || len(s.InitContainerStatuses) == 0, reasonIf(!initDone, "ContainersNotInitialized"))
	set(corev1.ContainersReady, containersReady, reasonIf(!containersReady, "ContainersNotReady"))
	set(corev1.PodReady, ready, reasonIf(!ready, "ContainersNotReady"))
	return s
}

func reasonIf(cond bool, reason string) string {
	if cond {
		return reason
	}
	return ""
}

func readinessGatesPass(pod *corev1.Pod, conds []corev1.PodCondition) bool {
	for _, g := range pod.Spec.ReadinessGates {
		i := findCondition(conds, g.ConditionType)
		if i < 0 || conds[i].Status != corev1.ConditionTrue {
			return false
		}
	}
	return true
}

func findCondition(conds []corev1.PodCondition, t corev1.PodConditionType) int {
	for i, c := range conds {
		if c.Type == t {
			return i
		}
	}
	return -1
}

// setCondition sets a condition, keeping its transition time when its status did not change.
func setCondition(conds *[]corev1.PodCondition, t corev1.PodConditionType, ok bool, reason string, now metav1.Time) {
	status := corev1.ConditionFalse
	if ok {
		status = corev1.ConditionTrue
	}
	c := corev1.PodCondition{Type: t, Status: status, Reason: reason, LastTransitionTime: now}
	if i := findCondition(*conds, t); i >= 0 {
		if (*conds)[i].Status == status {
			c.LastTransitionTime = (*conds)[i].LastTransitionTime
			c.LastProbeTime = (*conds)[i].LastProbeTime
		}
		(*conds)[i] = c
		return
	}
	*conds = append(*conds, c)
}

// statusLoop writes the pod's status whenever something changed, at most every 100ms.
func (w *podWorker) statusLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.status:
		}
		w.syncStatus(ctx)
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// statusRetryMax bounds the wait before a failed status write is tried again: a kubelet's
// status manager tries unsent statuses again on its sync every 10 s.
const statusRetryMax = 10 * time.Second

// nextStatusRetry is the wait after a failed status write that followed a wait of prev (0: the
// write before it succeeded): a second, doubling to statusRetryMax.
func nextStatusRetry(prev time.Duration) time.Duration {
	return min(max(2*prev, time.Second), statusRetryMax)
}

// syncStatus patches the pod's status with what changed since the last copy of the pod seen
// (a strategic merge patch computed from the two, as the kubelet does); it writes nothing when
// nothing changed. A failed write is tried again after a second, then after twice as long each
// time it fails again, at most statusRetryMax: under a saturated apiserver (429), retries every
// second from thousands of pods kept it saturated, with most status patches rejected (see
// docs/scale.md, "Design choices and what was measured").
func (w *podWorker) syncStatus(ctx context.Context) {
	w.statusMu.Lock()
	defer w.statusMu.Unlock()
	w.mu.Lock()
	pod, gone := w.pod, w.gone
	w.mu.Unlock()
	if gone {
		return
	}
	next := w.buildStatus(pod.Status)
	oldJSON, err1 := json.Marshal(corev1.Pod{Status: pod.Status})
	newJSON, err2 := json.Marshal(corev1.Pod{Status: next})
	if err1 != nil || err2 != nil {
		return
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, corev1.Pod{})
	if err != nil || string(patch) == "{}" {
		return
	}
	got, err := w.k.client.CoreV1().Pods(w.key.Namespace).Patch(ctx, w.key.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		if apierrors.IsNotFound(err) || ctx.Err() != nil {
			return
		}
		w.statusRetry = nextStatusRetry(w.statusRetry)
		klog.FromContext(ctx).V(1).Info("Writing the pod status", "err", err, "retryIn", w.statusRetry)
		time.AfterFunc(w.statusRetry, w.wake)
		return
	}
	w.statusRetry = 0
	got.ManagedFields = nil
	w.update(got, false)
}
