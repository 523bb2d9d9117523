package lifecycle

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func waitingPod(name string, labels map[string]string, edit func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "plane-a-cdplane", Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.example/cdplane:0.1.0"}}},
		Status: corev1.PodStatus{
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "main"}},
		},
	}
	if edit != nil {
		edit(p)
	}
	return p
}

func waitingFor(reason, message string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses[0].State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: message}
		p.Status.ContainerStatuses[0].RestartCount = 7
	}
}

func TestPodWaitReason(t *testing.T) {
	lastLog := func(container string) string {
		return "fatal: cannot open /driver-root/usr/lib/libnvidia-ml.so.1 (" + container + ")"
	}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want string
	}{
		"ready": {pod: waitingPod("p", nil, func(p *corev1.Pod) {
			p.Status.Conditions[0].Status = corev1.ConditionTrue
		}), want: ""},
		"terminating": {pod: waitingPod("p", nil, func(p *corev1.Pod) {
			p.DeletionTimestamp = &metav1.Time{}
			waitingFor("CrashLoopBackOff", "")(p)
		}), want: ""},
		"image pull": {pod: waitingPod("p", nil, waitingFor("ImagePullBackOff", "Back-off pulling image")),
			want: "ImagePullBackOff: registry.example/cdplane:0.1.0"},
		"image pull, first try": {pod: waitingPod("p", nil, waitingFor("ErrImagePull", "not found")),
			want: "ErrImagePull: registry.example/cdplane:0.1.0"},
		"crash loop": {pod: waitingPod("p", nil, waitingFor("CrashLoopBackOff", "back-off 5m0s")),
			want: "CrashLoopBackOff (container main, 7 restarts), last log line: fatal: cannot open /driver-root/usr/lib/libnvidia-ml.so.1 (main)"},
		"unschedulable": {pod: waitingPod("p", nil, func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				Reason: "Unschedulable", Message: "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.\nmore"})
		}), want: "unschedulable: 0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."},
		"other waiting reason": {pod: waitingPod("p", nil, waitingFor("CreateContainerConfigError", "secret \"regcred\" not found")),
			want: `CreateContainerConfigError: secret "regcred" not found`},
		"still creating": {pod: waitingPod("p", nil, waitingFor("ContainerCreating", "")), want: ""},
		"exited": {pod: waitingPod("p", nil, func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State.Terminated = &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 2}
		}), want: "container main Error (exit code 2)"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := podWaitReason(tc.pod, lastLog); got != tc.want {
				t.Errorf("podWaitReason = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestWaitingReasonsGroupsPods: the progress line names each distinct reason once, per
// component, with its pod count, and at most maxReasons of them.
func TestWaitingReasonsGroupsPods(t *testing.T) {
	ctrlLabels, pluginLabels := map[string]string{"app": "controller"}, map[string]string{"app": "plugin"}
	objs := []*corev1.Pod{
		waitingPod("c1", ctrlLabels, waitingFor("ImagePullBackOff", "")),
		waitingPod("k1", pluginLabels, waitingFor("ImagePullBackOff", "")),
		waitingPod("k2", pluginLabels, waitingFor("ImagePullBackOff", "")),
		waitingPod("k3", pluginLabels, func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionTrue }),
	}
	b := fake.NewClientBuilder()
	for _, o := range objs {
		b = b.WithObjects(o)
	}
	m := &Manager{c: b.Build()}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "plane-a-cdplane"}, Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: ctrlLabels}}}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "plane-a-cdplane"}, Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: pluginLabels}}}
	want := "controller ImagePullBackOff: registry.example/cdplane:0.1.0 (1 pod); kubelet plugin ImagePullBackOff: registry.example/cdplane:0.1.0 (2 pods)"
	if got := m.waitingReasons(t.Context(), d, ds); got != want {
		t.Errorf("waitingReasons =\n  %q\nwant\n  %q", got, want)
	}
}
