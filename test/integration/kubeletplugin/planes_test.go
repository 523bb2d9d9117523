package kubeletplugin

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller"
	"cdplane/internal/controller/computedomain"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/sim/nvmlsim"
	"cdplane/internal/testutil"
)

// TestPlaneWorkloadScheduledOnlyOnItsNodes: node A runs plane-a's kubelet plugin and node B
// plane-b's. A pod of plane-a, using the claim template plane-a's controller made for its
// ComputeDomain and allowed on both nodes, is not placed on node B while node A is
// unschedulable, although node B's channel is free (a pod whose claim names only the
// DeviceClass goes there); once node A is schedulable, the pod is placed on node A with a device
// of node A's pool.
func TestPlaneWorkloadScheduledOnlyOnItsNodes(t *testing.T) {
	t.Parallel()
	installManifests(t)
	const planeA, planeB = "plane-a", "plane-b"
	e := newEnv(t)
	// Node A is unschedulable from its creation: the scheduler never sees it schedulable
	// before the test allows it.
	nodeA := e.addNode(40, schedulable(), inPlane(planeA), cordoned())
	nodeB := e.addNode(41, schedulable(), inPlane(planeB))
	nodeA.start(4)
	nodeB.start(4)
	waitPublished(e, nodeA, 4+1, planeA)
	waitPublished(e, nodeB, 4+1, planeB)

	// Plane-a's controller, reconciling only this test's domains.
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := controller.NewManager(ctx, testCluster.Config, controller.Options{
		Options:            computedomain.Options{DriverNamespace: e.driverNS, DaemonImage: "x", ControlPlaneID: planeA},
		SkipNameValidation: true,
		DomainSelector:     labels.SelectorFromSet(labels.Set{"cdplane.test/env": e.ns}),
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("plane-a controller manager: %v", err)
		}
	})

	// A namespace of plane-a and a domain in it; the domain goes before the manager stops, so
	// that its finalizer is removed.
	ns := testCluster.Namespace(t, map[string]string{cdv1beta1.ControlPlaneLabel: planeA})
	cd := testutil.MakeComputeDomain("plane-a-cd").Namespace(ns).NumNodes(1).
		Label(cdv1beta1.ControlPlaneLabel, planeA).Label("cdplane.test/env", e.ns).Obj()
	if err := createAdmitted(e.Ctx(), e.C, cd); err != nil {
		t.Fatalf("creating ComputeDomain %s: %v", cd.Name, err)
	}
	t.Cleanup(func() { deleteAndWait(t, cd) })
	tmpl := &resourcev1.ResourceClaimTemplate{}
	e.Eventually(60*time.Second, "plane-a's workload claim template", func() (bool, error) {
		if err := e.C.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: cd.Spec.Channel.ResourceClaimTemplate.Name}, tmpl); err != nil {
			return false, fmt.Errorf("reading the template: %w", err)
		}
		return tmpl.Labels[cdv1beta1.ControlPlaneLabel] == planeA, fmt.Errorf("template labels %v", tmpl.Labels)
	})

	// Plane-a's workload, allowed on both nodes, with its claim made from the template.
	both := []string{nodeA.name, nodeB.name}
	workload := e.podFromTemplate(ns, "workload", both, tmpl)
	bound, cond := waitScheduling(e, workload)
	if bound != "" {
		t.Fatalf("plane-a's pod was placed on %s while plane-a's only node %s is unschedulable", bound, nodeA.name)
	}
	t.Logf("plane-a's pod, node %s unschedulable: %s", nodeA.name, cond.Message)
	if !strings.Contains(cond.Message, "cannot allocate all claims") {
		t.Errorf("plane-a's pod is unschedulable with %q, want node %s refused for its claim", cond.Message, nodeB.name)
	}

	// Control: nothing but the selector kept it off node B. A claim naming only the DeviceClass
	// gets node B's channel.
	plain := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns},
		Spec:       claimSpec("channel", cdv1beta1.ChannelDeviceClass, rawJSON(t, cdv1beta1.NewChannelConfig(string(cd.UID), ""))),
	}
	if err := e.C.Create(e.Ctx(), plain); err != nil {
		t.Fatal(err)
	}
	control := e.createPod(claimPod(ns, "control", both, corev1.PodResourceClaim{Name: "channel", ResourceClaimName: ptr.To(plain.Name)}))
	if bound, cond := waitScheduling(e, control); bound != nodeB.name {
		t.Fatalf("the pod whose claim names only the DeviceClass: placed on %q (%s), want %s", bound, cond.Message, nodeB.name)
	}
	checkAllocation(e, plain, nodeB, planeB)
	if err := e.C.Get(e.Ctx(), client.ObjectKeyFromObject(workload), workload); err != nil {
		t.Fatal(err)
	}
	if workload.Spec.NodeName != "" {
		t.Fatalf("plane-a's pod was placed on %s", workload.Spec.NodeName)
	}

	// Node A becomes schedulable: plane-a's pod goes there, with a device of node A's pool.
	setUnschedulable(e, nodeA, false)
	e.Eventually(60*time.Second, "plane-a's pod placed", func() (bool, error) {
		if err := e.C.Get(context.Background(), client.ObjectKeyFromObject(workload), workload); err != nil {
			return false, fmt.Errorf("reading the pod: %w", err)
		}
		return workload.Spec.NodeName != "", fmt.Errorf("pod conditions %+v", workload.Status.Conditions)
	})
	if workload.Spec.NodeName != nodeA.name {
		t.Fatalf("plane-a's pod placed on %s, want %s", workload.Spec.NodeName, nodeA.name)
	}
	if len(workload.Status.ResourceClaimStatuses) != 1 || workload.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod claim statuses %+v", workload.Status.ResourceClaimStatuses)
	}
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: *workload.Status.ResourceClaimStatuses[0].ResourceClaimName}}
	checkAllocation(e, claim, nodeA, planeA)
}

// cordoned creates the node with spec.unschedulable set.
func cordoned() nodeOption {
	return func(n *corev1.Node, _ *nvmlsim.Node) { n.Spec.Unschedulable = true }
}

// setUnschedulable sets the node's spec.unschedulable, as kubectl cordon and uncordon do.
func setUnschedulable(e *env, n *node, unschedulable bool) {
	e.T.Helper()
	got := &corev1.Node{}
	if err := e.C.Get(e.Ctx(), client.ObjectKey{Name: n.name}, got); err != nil {
		e.T.Fatal(err)
	}
	orig := got.DeepCopy()
	got.Spec.Unschedulable = unschedulable
	if err := e.C.Patch(e.Ctx(), got, client.MergeFrom(orig)); err != nil {
		e.T.Fatal(err)
	}
}

// waitPublished waits until the node's slices hold want devices, each of plane id.
func waitPublished(e *env, n *node, want int, id string) {
	e.T.Helper()
	e.Eventually(60*time.Second, "devices of "+n.name+" published", func() (bool, error) {
		slices, err := nodeSlices(e, n.name)
		if err != nil {
			return false, fmt.Errorf("listing slices: %w", err)
		}
		count := 0
		for _, s := range slices {
			for _, d := range s.Spec.Devices {
				if cp := d.Attributes[kubeletplugin.AttributeControlPlane].StringValue; cp == nil || *cp != id {
					return false, fmt.Errorf("device %s: controlPlane %v, want %q", d.Name, cp, id)
				}
				count++
			}
		}
		return count == want, fmt.Errorf("%d devices, want %d", count, want)
	})
}

// claimPod is a pod with one claim, allowed on the given nodes only (the cluster holds other
// tests' nodes).
func claimPod(ns, name string, nodes []string, claim corev1.PodResourceClaim) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: nodes}},
				}}},
			}},
			TerminationGracePeriodSeconds: ptr.To(int64(0)),
			Containers: []corev1.Container{{
				Name: "main", Image: "workload:test",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: claim.Name}}},
			}},
			ResourceClaims: []corev1.PodResourceClaim{claim},
		},
	}
}

func (e *env) createPod(pod *corev1.Pod) *corev1.Pod {
	e.T.Helper()
	if err := e.C.Create(e.Ctx(), pod); err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() { _ = e.C.Delete(context.Background(), pod, client.GracePeriodSeconds(0)) })
	return pod
}

// podFromTemplate creates a pod whose claim comes from tmpl, playing kube-controller-manager's
// resource claim controller (not running here): the claim, owned by the pod, and the pod's
// claim status. The pod is held by a scheduling gate until its claim exists, so that the
// scheduler's first attempt already sees the claim.
func (e *env) podFromTemplate(ns, name string, nodes []string, tmpl *resourcev1.ResourceClaimTemplate) *corev1.Pod {
	e.T.Helper()
	const podClaim, gate = "channel", "cdplane.test/claim-created"
	pod := claimPod(ns, name, nodes, corev1.PodResourceClaim{Name: podClaim, ResourceClaimTemplateName: ptr.To(tmpl.Name)})
	pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: gate}}
	e.createPod(pod)

	claim := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: name + "-" + podClaim + "-", Namespace: ns,
			Labels:      tmpl.Spec.Labels,
			Annotations: map[string]string{"resource.kubernetes.io/pod-claim-name": podClaim},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: tmpl.Spec.Spec,
	}
	for k, v := range tmpl.Spec.Annotations {
		claim.Annotations[k] = v
	}
	if err := e.C.Create(e.Ctx(), claim); err != nil {
		e.T.Fatalf("creating the claim of pod %s: %v", name, err)
	}
	pod.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: podClaim, ResourceClaimName: ptr.To(claim.Name)}}
	if err := e.C.Status().Update(e.Ctx(), pod); err != nil {
		e.T.Fatalf("writing the claim status of pod %s: %v", name, err)
	}
	pod.Spec.SchedulingGates = nil
	if err := e.C.Update(e.Ctx(), pod); err != nil {
		e.T.Fatalf("lifting the scheduling gate of pod %s: %v", name, err)
	}
	return pod
}

// waitScheduling waits for the scheduler's verdict on the pod: the node it was placed on, or
// "" and its PodScheduled condition when it was found unschedulable.
func waitScheduling(e *env, pod *corev1.Pod) (string, corev1.PodCondition) {
	e.T.Helper()
	var cond corev1.PodCondition
	e.Eventually(60*time.Second, "scheduler decided on pod "+pod.Name, func() (bool, error) {
		if err := e.C.Get(context.Background(), client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err
		}
		if pod.Spec.NodeName != "" {
			return true, nil
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				cond = c
				return true, nil
			}
		}
		return false, fmt.Errorf("pod conditions %+v", pod.Status.Conditions)
	})
	return pod.Spec.NodeName, cond
}

// checkAllocation checks that the claim is allocated one device published in n's pool by plane
// id.
func checkAllocation(e *env, claim *resourcev1.ResourceClaim, n *node, id string) {
	e.T.Helper()
	if err := e.C.Get(e.Ctx(), client.ObjectKeyFromObject(claim), claim); err != nil {
		e.T.Fatal(err)
	}
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		e.T.Fatalf("claim %s: allocation %+v, want one device", claim.Name, claim.Status.Allocation)
	}
	r := claim.Status.Allocation.Devices.Results[0]
	if r.Driver != cdv1beta1.DriverName || r.Pool != n.name {
		e.T.Fatalf("claim %s: allocated %s/%s/%s, want a device of pool %s/%s", claim.Name, r.Driver, r.Pool, r.Device, cdv1beta1.DriverName, n.name)
	}
	slices, err := nodeSlices(e, n.name)
	if err != nil {
		e.T.Fatal(err)
	}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			if d.Name == r.Device && s.Spec.Pool.Name == r.Pool {
				if cp := d.Attributes[kubeletplugin.AttributeControlPlane].StringValue; cp == nil || *cp != id {
					e.T.Errorf("claim %s: device %s has controlPlane %v, want %q", claim.Name, d.Name, cp, id)
				}
				return
			}
		}
	}
	e.T.Errorf("claim %s: device %s is not published in pool %s", claim.Name, r.Device, n.name)
}

// deleteAndWait deletes the domain and waits until its finalizer has been removed.
func deleteAndWait(t *testing.T, cd *cdv1beta1.ComputeDomain) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := testCluster.Client.Delete(ctx, cd); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting ComputeDomain %s: %v", cd.Name, err)
		return
	}
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		err := testCluster.Client.Get(ctx, client.ObjectKeyFromObject(cd), &cdv1beta1.ComputeDomain{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("ComputeDomain %s still there after 30s", cd.Name)
	}
}
