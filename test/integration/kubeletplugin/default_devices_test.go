package kubeletplugin

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin"
)

// TestDefaultPublishesOneSliceOfTwoDevices: with the default number of channels a node publishes
// one slice holding channel-0 and daemon-0, which is all the shipped DeviceClasses can allocate:
// a real kube-scheduler places a pod of the domain there with channel-0; a second pod of the
// same domain on that node stays unschedulable (one channel claim per node, as in NVIDIA's
// driver); and a claim allocated a higher channel while the node still published it (before an
// upgrade lowered the count) is still prepared, with that channel injected.
func TestDefaultPublishesOneSliceOfTwoDevices(t *testing.T) {
	t.Parallel()
	installManifests(t)
	e := newEnv(t)
	n := e.addNode(11, schedulable())
	n.start(kubeletplugin.DefaultNumChannels)

	var slices []resourcev1.ResourceSlice
	e.Eventually(60*time.Second, "the node's devices published", func() (bool, error) {
		var err error
		slices, err = nodeSlices(e, n.name)
		if err != nil {
			return false, fmt.Errorf("listing slices: %w", err)
		}
		return len(slices) == 1 && len(slices[0].Spec.Devices) == 2, fmt.Errorf("%d slices", len(slices))
	})
	var names []string
	for _, d := range slices[0].Spec.Devices {
		names = append(names, d.Name)
	}
	if len(names) != 2 || names[0] != "channel-0" || names[1] != kubeletplugin.DaemonDeviceName {
		t.Errorf("published %v, want [channel-0 %s]", names, kubeletplugin.DaemonDeviceName)
	}

	cd := e.createCD(e.ns, "default-devices")
	e.setClique(cd, n, cdv1beta1.StatusReady)
	_, first := e.scheduledWorkload(t, n, cd, "first")
	e.waitScheduled(first, 60*time.Second)
	if first.Spec.NodeName != n.name {
		t.Fatalf("the first pod of the domain was scheduled on %q, want %s", first.Spec.NodeName, n.name)
	}
	_, second := e.scheduledWorkload(t, n, cd, "second")
	// The scheduler tries the pod and reports it unschedulable: the node's one channel is taken.
	e.Eventually(60*time.Second, "the second pod reported unschedulable", func() (bool, error) {
		if err := e.C.Get(e.Ctx(), client.ObjectKeyFromObject(second), second); err != nil {
			return false, err
		}
		for _, c := range second.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, fmt.Errorf("node %q, conditions %+v", second.Spec.NodeName, second.Status.Conditions)
	})
	if second.Spec.NodeName != "" {
		t.Errorf("second pod bound to %s with one channel published", second.Spec.NodeName)
	}

	// A claim allocated channel-5 before the node published fewer channels.
	old := e.allocatedClaim(e.ns, "allocated-before", n, kubeletplugin.ChannelDeviceName(5),
		rawJSON(t, cdv1beta1.NewChannelConfig(string(cd.UID), cdv1beta1.AllocationModeSingle)), nil)
	n.mustPrepare(old)
	spec, ok := n.cdiSpec(old.UID)
	if !ok || len(spec.Devices) != 1 || !cmpPaths(deviceNodePaths(spec.Devices[0]), "/dev/nvidia-caps-imex-channels/channel5") {
		t.Errorf("CDI spec of a claim allocated channel-5: %+v", spec)
	}
}

// scheduledWorkload creates a claim of domain cd with the default channel class and a pod on
// node n that uses it, both named name, left to the scheduler.
func (e *env) scheduledWorkload(t *testing.T, n *node, cd *cdv1beta1.ComputeDomain, name string) (*resourcev1.ResourceClaim, *corev1.Pod) {
	t.Helper()
	claim := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec:       claimSpec("channel", cdv1beta1.ChannelDeviceClass, rawJSON(t, cdv1beta1.NewChannelConfig(string(cd.UID), ""))),
	}
	if err := e.C.Create(e.Ctx(), claim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.C.Delete(context.Background(), claim) })
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{corev1.LabelHostname: n.name},
			TerminationGracePeriodSeconds: ptr.To(int64(0)),
			Containers: []corev1.Container{{
				Name: "main", Image: "workload:test",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "channel"}}},
			}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "channel", ResourceClaimName: ptr.To(claim.Name)}},
		},
	}
	if err := e.C.Create(e.Ctx(), pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.C.Delete(context.Background(), pod, client.GracePeriodSeconds(0)) })
	return claim, pod
}

// waitScheduled waits until the scheduler has bound pod to a node, and reads it.
func (e *env) waitScheduled(pod *corev1.Pod, timeout time.Duration) {
	e.T.Helper()
	e.Eventually(timeout, "pod "+pod.Name+" scheduled", func() (bool, error) {
		if err := e.C.Get(e.Ctx(), client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err
		}
		return pod.Spec.NodeName != "", fmt.Errorf("pod conditions %+v", pod.Status.Conditions)
	})
}
