package planes

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
)

var eventSeq atomic.Int32

// pluginEvent is an event as a kubelet plugin of node posts it on a tenant's pod: a Warning
// regarding the pod, related to its claim, reported by the driver from the node.
func pluginEvent(ns, node string) *eventsv1.Event {
	return &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("worker.%d", eventSeq.Add(1))},
		EventTime:  metav1.NowMicro(), Type: corev1.EventTypeWarning, Action: "PrepareResources",
		Reason: kubeletplugin.ReasonComputeDomainInOtherNamespace, Note: "Claim cannot be prepared",
		ReportingController: cdv1beta1.DriverName, ReportingInstance: node,
		Regarding: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: "worker", UID: "worker-uid"},
		Related:   &corev1.ObjectReference{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim", Namespace: ns, Name: "worker-channel", UID: "claim-uid"},
	}
}

// A leaked kubelet-plugin token may post events in any namespace (RBAC: tenant namespaces are
// not known in advance), but admission holds it to events regarding a pod, reported by this
// driver from its own node, related to nothing, a claim of the event's namespace or its own
// node; and it may update (the broadcaster's series patch) only its own node's events.
func TestPluginTokenPostsOnlyPodEventsOfItsNode(t *testing.T) {
	ctx := testContext(t)
	const id = "evpol"
	driverNS := installPlaneRights(t, id, "rbac-kubelet-plugin.yaml", "policy-kubelet-plugin-events.yaml")
	own, sibling := newNode(t, map[string]string{cdv1beta1.ControlPlaneLabel: id}), newNode(t, map[string]string{cdv1beta1.ControlPlaneLabel: id})
	pluginSA := plane.Name(id, "cdplane-kubelet-plugin")
	pluginPod := testutil.MakePod("plugin-"+own, driverNS).ServiceAccount(pluginSA).NodeName(own).Obj()
	if err := testCluster.Client.Create(ctx, pluginPod); err != nil {
		t.Fatal(err)
	}
	plugin := podBoundClient(t, driverNS, pluginSA, pluginPod).EventsV1()
	tenant := testCluster.Namespace(t, nil)
	create := func(ev *eventsv1.Event) error {
		_, err := plugin.Events(ev.Namespace).Create(ctx, ev, dryRun)
		return err
	}
	eventuallyRefused(t, "an event in another node's name with the plugin's token", func() error {
		return create(pluginEvent(tenant, sibling))
	})

	for name, tc := range map[string]struct {
		change func(*eventsv1.Event)
		want   string // "" admitted, else part of the refusal
	}{
		"warning on a tenant's pod": {change: func(*eventsv1.Event) {}},
		"normal on its own pod about its node": {change: func(ev *eventsv1.Event) {
			ev.Namespace, ev.Type, ev.Reason = driverNS, corev1.EventTypeNormal, kubeletplugin.ReasonDevicesPublished
			ev.Regarding = corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: driverNS, Name: pluginPod.Name, UID: pluginPod.UID}
			ev.Related = &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: own}
		}},
		"without a related object": {change: func(ev *eventsv1.Event) { ev.Related = nil }},
		"regarding a ComputeDomain": {change: func(ev *eventsv1.Event) {
			ev.Regarding = corev1.ObjectReference{APIVersion: cdv1beta1.GroupVersion.String(), Kind: "ComputeDomain", Namespace: tenant, Name: "train"}
		}, want: "only post events regarding a Pod (v1), not resource.nvidia.com/v1beta1 ComputeDomain"},
		"regarding a Node": {change: func(ev *eventsv1.Event) {
			ev.Namespace = metav1.NamespaceDefault
			ev.Regarding = corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: own}
			ev.Related = nil
		}, want: "only post events regarding a Pod (v1), not v1 Node"},
		"another node's name": {change: func(ev *eventsv1.Event) { ev.ReportingInstance = sibling },
			want: "only post events with reportingInstance its own node (" + own + ")"},
		"another reporting controller": {change: func(ev *eventsv1.Event) { ev.ReportingController = "kubelet" },
			want: `reportingController compute-domain.nvidia.com, not "kubelet"`},
		"related to a Secret": {change: func(ev *eventsv1.Event) {
			ev.Related = &corev1.ObjectReference{APIVersion: "v1", Kind: "Secret", Namespace: tenant, Name: "creds"}
		}, want: "only relate its events to a ResourceClaim of their namespace or to its own node"},
		"related to another node": {change: func(ev *eventsv1.Event) {
			ev.Related = &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: sibling}
		}, want: "only relate its events"},
	} {
		t.Run(name, func(t *testing.T) {
			ev := pluginEvent(tenant, own)
			tc.change(ev)
			err := create(ev)
			checkAdmission(t, name, err, tc.want)
		})
	}

	t.Run("series updates", func(t *testing.T) {
		series := func(c kubernetes.Interface, ev *eventsv1.Event) error {
			patch := fmt.Appendf(nil, `{"series":{"count":2,"lastObservedTime":%q}}`, time.Now().UTC().Format("2006-01-02T15:04:05.000000Z"))
			_, err := c.EventsV1().Events(ev.Namespace).Patch(ctx, ev.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			return err
		}
		pluginCS := podBoundClient(t, driverNS, pluginSA, pluginPod)
		mine, err := plugin.Events(tenant).Create(ctx, pluginEvent(tenant, own), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating its own event: %v", err)
		}
		if err := series(pluginCS, mine); err != nil {
			t.Errorf("a series update of its own event: %v, want admitted", err)
		}
		admin, err := kubernetes.NewForConfig(testCluster.Config)
		if err != nil {
			t.Fatal(err)
		}
		theirs := pluginEvent(tenant, sibling)
		theirs.ReportingController = "kubelet"
		if theirs, err = admin.EventsV1().Events(tenant).Create(ctx, theirs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := series(pluginCS, theirs); !isAdmissionRefusal(err) {
			t.Errorf("a series update of another reporter's event: %v, want an admission refusal", err)
		}
		// Taking it over: refused (by the apiserver's validation of reportingController and
		// reportingInstance, immutable, or by the policy's check of the old event).
		hijack := fmt.Appendf(nil, `{"reportingController":%q,"reportingInstance":%q,"note":"forged"}`, cdv1beta1.DriverName, own)
		if _, err := pluginCS.EventsV1().Events(tenant).Patch(ctx, theirs.Name, types.MergePatchType, hijack, metav1.PatchOptions{}); err == nil {
			t.Error("the plugin took over another reporter's event")
		}
	})
}
