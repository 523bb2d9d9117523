package lifecycle

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/util/podutils"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// maxReasons bounds the distinct reasons a progress line names.
const maxReasons = 3

// waitingReasons says why the not-Ready pods of the Deployment d and the DaemonSet ds are not
// Ready, for a progress line: each distinct reason once, with how many pods and which component
// give it ("" when every pod is Ready, or none has said why yet).
func (m *Manager) waitingReasons(ctx context.Context, d *appsv1.Deployment, ds *appsv1.DaemonSet) string {
	counts := map[string]int{}
	var order []string
	for _, w := range []struct {
		component string
		ns        string
		selector  *metav1.LabelSelector
	}{{"controller", d.Namespace, d.Spec.Selector}, {"kubelet plugin", ds.Namespace, ds.Spec.Selector}} {
		sel, err := metav1.LabelSelectorAsSelector(w.selector)
		if err != nil {
			continue
		}
		pods := &corev1.PodList{}
		if err := m.c.List(ctx, pods, client.InNamespace(w.ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			continue // best effort: the wait goes on with the counts
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			reason := podWaitReason(p, func(container string) string { return m.lastLogLine(ctx, p, container) })
			if reason == "" {
				continue
			}
			key := w.component + " " + reason
			if counts[key] == 0 {
				order = append(order, key)
			}
			counts[key]++
		}
	}
	var parts []string
	for _, key := range order[:min(len(order), maxReasons)] {
		parts = append(parts, fmt.Sprintf("%s (%d pod%s)", key, counts[key], map[bool]string{true: "", false: "s"}[counts[key] == 1]))
	}
	if len(order) > maxReasons {
		parts = append(parts, fmt.Sprintf("and %d more", len(order)-maxReasons))
	}
	return strings.Join(parts, "; ")
}

// podWaitReason says why pod p is not Ready, "" when it is (or terminating, or nothing says
// why yet): unschedulable with the scheduler's message, a container waiting with its reason (an
// image pull failing names the image; a crash loop gives its last log line, read through
// lastLog), or a container not ready.
func podWaitReason(p *corev1.Pod, lastLog func(container string) string) string {
	if p.DeletionTimestamp != nil || podutils.IsPodReady(p) {
		return ""
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return "unschedulable: " + firstLine(c.Message)
		}
	}
	statuses := slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses)
	images := map[string]string{}
	for _, c := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
		images[c.Name] = c.Image
	}
	for _, s := range statuses {
		w := s.State.Waiting
		if w == nil || w.Reason == "" || w.Reason == "ContainerCreating" || w.Reason == "PodInitializing" {
			continue
		}
		switch w.Reason {
		case "ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull":
			return fmt.Sprintf("%s: %s", w.Reason, images[s.Name])
		case "CrashLoopBackOff":
			out := fmt.Sprintf("CrashLoopBackOff (container %s, %d restarts)", s.Name, s.RestartCount)
			if line := lastLog(s.Name); line != "" {
				out += ", last log line: " + line
			}
			return out
		}
		if w.Message != "" {
			return fmt.Sprintf("%s: %s", w.Reason, firstLine(w.Message))
		}
		return w.Reason
	}
	for _, s := range statuses {
		if t := s.State.Terminated; t != nil && t.Reason != "" && t.Reason != "Completed" {
			return fmt.Sprintf("container %s %s (exit code %d)", s.Name, t.Reason, t.ExitCode)
		}
	}
	return ""
}

// lastLogLine returns the last line the previous run of container in p logged ("" when it
// cannot be read: best effort).
func (m *Manager) lastLogLine(ctx context.Context, p *corev1.Pod, container string) string {
	if m.cfg == nil {
		return ""
	}
	cs, err := kubernetes.NewForConfig(m.cfg)
	if err != nil {
		return ""
	}
	tail := int64(1)
	raw, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container, Previous: true, TailLines: &tail}).DoRaw(ctx)
	if err != nil {
		return ""
	}
	return firstLine(strings.TrimSpace(string(raw)))
}

// firstLine returns s's first line, at most 200 characters.
func firstLine(s string) string {
	sc := bufio.NewScanner(strings.NewReader(s))
	if !sc.Scan() {
		return ""
	}
	line := sc.Text()
	if len(line) > 200 {
		line = line[:200] + "…"
	}
	return line
}
