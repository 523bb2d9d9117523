package testutil

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestMakePod(t *testing.T) {
	owner := ControllerRef("apps/v1", "DaemonSet", "ds", "ds-uid")
	got := MakePod("p", "ns").UID("u").Label("a", "1").Annotation("b", "2").OwnedBy(owner).Created(t0).Terminating(t0.Add(time.Minute)).
		NodeName("n1").NodeSelector("k", "v").ServiceAccount("sa").Image("img").TerminationGracePeriod(0).
		Claim("c", "claim-c").ClaimFromTemplate("t", "tmpl").ClaimStatus("t", "p-t-1").ClaimStatus("u", "").
		PodIP("127.0.0.1").Phase(corev1.PodRunning).Ready(false).Ready(true).Obj()
	want := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "p", Namespace: "ns", UID: "u", Labels: map[string]string{"a": "1"}, Annotations: map[string]string{"b": "2"},
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "ds", UID: "ds-uid", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
			CreationTimestamp: metav1.NewTime(t0), DeletionTimestamp: ptr.To(metav1.NewTime(t0.Add(time.Minute))),
		},
		Spec: corev1.PodSpec{
			NodeName: "n1", NodeSelector: map[string]string{"k": "v"}, ServiceAccountName: "sa", TerminationGracePeriodSeconds: ptr.To(int64(0)),
			Containers: []corev1.Container{{Name: "main", Image: "img", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "c"}, {Name: "t"}}}}},
			ResourceClaims: []corev1.PodResourceClaim{
				{Name: "c", ResourceClaimName: ptr.To("claim-c")}, {Name: "t", ResourceClaimTemplateName: ptr.To("tmpl")},
			},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}},
			Conditions:            []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "t", ResourceClaimName: ptr.To("p-t-1")}, {Name: "u"}},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pod (-want +got):\n%s", diff)
	}
}

func TestMakeResourceClaim(t *testing.T) {
	raw := `{"a":1}`
	got := MakeResourceClaim("c", "ns").UID("u").Label("a", "1").Annotation("b", "2").OwnedBy(ControllerRef("v1", "Pod", "p", "pu")).
		Request("r", "class", "true").Config("drv", raw, "r").
		Device("r", "drv", "pool", "dev-0").AllocatedConfig(resourcev1.AllocationConfigSourceClass, "drv", raw).ReservedFor("p", "pu").Obj()
	opaque := resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: "drv", Parameters: runtime.RawExtension{Raw: []byte(raw)}}}
	want := &resourcev1.ResourceClaim{
		TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "c", Namespace: "ns", UID: "u", Labels: map[string]string{"a": "1"}, Annotations: map[string]string{"b": "2"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "pu", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "r", Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: "class", Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "true"}}},
			}}},
			Config: []resourcev1.DeviceClaimConfiguration{{Requests: []string{"r"}, DeviceConfiguration: opaque}},
		}},
		Status: resourcev1.ResourceClaimStatus{
			Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
				Results: []resourcev1.DeviceRequestAllocationResult{{Request: "r", Driver: "drv", Pool: "pool", Device: "dev-0"}},
				Config:  []resourcev1.DeviceAllocationConfiguration{{Source: resourcev1.AllocationConfigSourceClass, DeviceConfiguration: opaque}},
			}},
			ReservedFor: []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "pu"}},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("claim (-want +got):\n%s", diff)
	}
	if a := MakeResourceClaim("c", "ns").Allocated().Obj().Status.Allocation; a == nil || len(a.Devices.Results) != 0 {
		t.Errorf("Allocated: allocation %+v, want an empty one", a)
	}
}

func TestMakeNode(t *testing.T) {
	got := MakeNode("n1").UID("u").Label("a", "1").Taint("k", "v", corev1.TaintEffectNoSchedule).InternalIP("127.0.0.1").Ready(true).Ready(false).Obj()
	want := &corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u", Labels: map[string]string{"a": "1"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("node (-want +got):\n%s", diff)
	}
}

func TestMakeDaemonSet(t *testing.T) {
	tol := corev1.Toleration{Operator: corev1.TolerationOpExists}
	got := MakeDaemonSet("ds", "ns").UID("u").Label("a", "1").Selector("app", "x").PodLabel("b", "2").OwnedBy(ControllerRef("v1", "X", "x", "xu")).
		NodeSelector("k", "v").Toleration(tol).ServiceAccount("sa").PriorityClass("high").TerminationGracePeriod(30).
		Image("img").ClaimFromTemplate("c", "tmpl").NumberReady(3, 2).Obj()
	want := &appsv1.DaemonSet{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "ds", Namespace: "ns", UID: "u", Labels: map[string]string{"a": "1"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "X", Name: "x", UID: "xu", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x", "b": "2"}},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"k": "v"}, Tolerations: []corev1.Toleration{tol}, ServiceAccountName: "sa",
					PriorityClassName: "high", TerminationGracePeriodSeconds: ptr.To(int64(30)),
					Containers:     []corev1.Container{{Name: "main", Image: "img", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "c"}}}}},
					ResourceClaims: []corev1.PodResourceClaim{{Name: "c", ResourceClaimTemplateName: ptr.To("tmpl")}},
				},
			},
		},
		Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 3, CurrentNumberScheduled: 3, NumberReady: 2},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DaemonSet (-want +got):\n%s", diff)
	}
}

// Obj returns a copy: changing it leaves the wrapper, and the next object built, alone.
func TestObjReturnsACopy(t *testing.T) {
	w := MakePod("p", "ns").Label("a", "1")
	first := w.Obj()
	first.Labels["a"] = "changed"
	first.Spec.Containers[0].Image = "changed"
	if second := w.Obj(); second.Labels["a"] != "1" || second.Spec.Containers[0].Image != "pause" {
		t.Errorf("a change to one built pod reached the next: %+v", second)
	}
}
