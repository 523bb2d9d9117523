package simkubelet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"cdplane/internal/sim/kubelet"
	"cdplane/internal/testutil"
)

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// podOn is a pod placed by the scheduler on one node (by its hostname label), running one
// container of image.
func podOn(ns, name, node, image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{corev1.LabelHostname: node},
			TerminationGracePeriodSeconds: ptr.To(int64(5)),
			Containers:                    []corev1.Container{{Name: "main", Image: image}},
		},
	}
}

func createPod(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := kube.CoreV1().Pods(pod.Namespace).Create(ctxFor(t), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
	t.Cleanup(func() {
		_ = kube.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
	})
	return got
}

// waitPod waits until cond holds for the pod and returns it.
func waitPod(t *testing.T, ns, name string, timeout time.Duration, what string, cond func(*corev1.Pod) error) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	testutil.Eventually(t, timeout, what, func() (bool, error) {
		var err error
		pod, err = kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if err := cond(pod); err != nil {
			return false, fmt.Errorf("%w (phase %s, conditions %s, containers %s)", err, pod.Status.Phase, conditions(pod), containerStates(pod))
		}
		return true, nil
	})
	return pod
}

// waitPodGone waits until the pod is no longer in the API.
func waitPodGone(t *testing.T, ns, name string, timeout time.Duration) {
	t.Helper()
	testutil.Eventually(t, timeout, "pod "+name+" removed", func() (bool, error) {
		_, err := kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err == nil:
			return false, errors.New("still there")
		default:
			return false, fmt.Errorf("still there: %w", err)
		}
	})
}

func running(p *corev1.Pod) error {
	if p.Status.Phase != corev1.PodRunning {
		return fmt.Errorf("not running")
	}
	return nil
}

func conditions(p *corev1.Pod) string {
	var out []string
	for _, c := range p.Status.Conditions {
		out = append(out, fmt.Sprintf("%s=%s", c.Type, c.Status))
	}
	return strings.Join(out, ",")
}

func containerStates(p *corev1.Pod) string {
	var out []string
	for _, c := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		s := "?"
		switch {
		case c.State.Running != nil:
			s = "running"
		case c.State.Terminated != nil:
			s = fmt.Sprintf("terminated(%d)", c.State.Terminated.ExitCode)
		case c.State.Waiting != nil:
			s = "waiting(" + c.State.Waiting.Reason + ": " + c.State.Waiting.Message + ")"
		}
		out = append(out, fmt.Sprintf("%s:%s restarts=%d ready=%v", c.Name, s, c.RestartCount, c.Ready))
	}
	return strings.Join(out, ", ")
}

// waitLogs waits until a container's log, read through the apiserver, satisfies cond.
func waitLogs(t *testing.T, ns, pod, container string, cond func(string) bool) string {
	t.Helper()
	var out string
	testutil.Eventually(t, 30*time.Second, "log of "+pod+"/"+container, func() (bool, error) {
		data, err := kube.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(context.Background())
		out = string(data)
		if err != nil {
			return false, err
		}
		return cond(out), fmt.Errorf("log so far: %q", out)
	})
	return out
}

// recordField returns the rest of the first line of a noop record starting with prefix.
func recordField(record, prefix string) (string, bool) {
	for _, line := range strings.Split(record, "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			return rest, true
		}
	}
	return "", false
}

func inPodRange(t *testing.T, ip string) {
	t.Helper()
	addr, err := netip.ParseAddr(ip)
	if err != nil || !netip.MustParsePrefix(kubelet.DefaultPodCIDR).Contains(addr) {
		t.Errorf("pod IP %q is not in %s", ip, kubelet.DefaultPodCIDR)
	}
}
