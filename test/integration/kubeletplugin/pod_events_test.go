package kubeletplugin

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/testutil"
)

// workloadPod creates a pod on node n using claim, and reserves the claim for it, as the
// scheduler does before the kubelet prepares the claim.
func (e *env) workloadPod(name string, n *node, claim *resourcev1.ResourceClaim) *corev1.Pod {
	e.T.Helper()
	pod := testutil.MakePod(name, claim.Namespace).NodeName(n.name).Claim("channel", claim.Name).Obj()
	if err := e.C.Create(e.Ctx(), pod); err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() { _ = e.C.Delete(e.Ctx(), pod) })
	claim.Status.ReservedFor = append(claim.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID})
	if err := e.C.Status().Update(e.Ctx(), claim); err != nil {
		e.T.Fatalf("reserving claim %s for pod %s: %v", claim.Name, pod.Name, err)
	}
	return pod
}

// podEvents lists the events regarding pod with the given reason.
func (e *env) podEvents(pod *corev1.Pod, reason string) ([]eventsv1.Event, error) {
	list := &eventsv1.EventList{}
	if err := e.C.List(e.Ctx(), list, client.InNamespace(pod.Namespace)); err != nil {
		return nil, err
	}
	var out []eventsv1.Event
	for _, ev := range list.Items {
		if ev.Regarding.UID == pod.UID && ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out, nil
}

// TestUserFixablePrepareFailurePostsPodEvent: a channel claim whose ComputeDomain is in another
// namespace fails as before (the kubelet's error is unchanged), and its pod gets one Warning
// event saying why and what to do, from this driver on this node. The kubelet's retries do not
// reach the API: still one event, not even a series update.
func TestUserFixablePrepareFailurePostsPodEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.addNode(2)
	n.start(4)
	other := testCluster.Namespace(t, nil)
	cd := e.createCD(other, "elsewhere")
	e.setClique(cd, n, cdv1beta1.StatusReady)
	claim := e.channelClaim(e.ns, "wrong-ns", n, cd, "")
	pod := e.workloadPod("worker", n, claim)

	retry := func(times int) {
		for range times {
			got, _ := n.prepare(claim)
			if !strings.HasPrefix(got.Error, "claim "+e.ns+"/wrong-ns: permanent error: claim "+e.ns+"/wrong-ns is in namespace") {
				t.Fatalf("prepare error %q, want the permanent namespace error, unchanged", got.Error)
			}
		}
	}
	retry(5)
	var evs []eventsv1.Event
	e.Eventually(time.Minute, "a "+kubeletplugin.ReasonComputeDomainInOtherNamespace+" event on the pod", func() (bool, error) {
		var err error
		evs, err = e.podEvents(pod, kubeletplugin.ReasonComputeDomainInOtherNamespace)
		return len(evs) > 0, err
	})
	ev := evs[0]
	wantNote := fmt.Sprintf("Claim %s/wrong-ns of ComputeDomain %s/elsewhere cannot be prepared on node %s: claim %s/wrong-ns is in namespace %s, but its ComputeDomain elsewhere is in namespace %s",
		e.ns, other, n.name, e.ns, e.ns, other)
	switch {
	case ev.Type != corev1.EventTypeWarning || ev.Action != "PrepareResources":
		t.Errorf("event type %s, action %s; want Warning, PrepareResources", ev.Type, ev.Action)
	case ev.ReportingController != cdv1beta1.DriverName || ev.ReportingInstance != n.name:
		t.Errorf("reported by %s/%s, want %s/%s (the driver, the node)", ev.ReportingController, ev.ReportingInstance, cdv1beta1.DriverName, n.name)
	case ev.Regarding.APIVersion != "v1" || ev.Regarding.Kind != "Pod" || ev.Regarding.Name != pod.Name || ev.Regarding.Namespace != e.ns ||
		ev.Regarding.UID != pod.UID:
		t.Errorf("regarding %+v, want pod %s/%s", ev.Regarding, e.ns, pod.Name)
	case ev.Related == nil || ev.Related.APIVersion != "resource.k8s.io/v1" || ev.Related.Kind != "ResourceClaim" ||
		ev.Related.Namespace != e.ns || ev.Related.Name != claim.Name || ev.Related.UID != claim.UID:
		t.Errorf("related %+v, want claim %s/%s", ev.Related, e.ns, claim.Name)
	case !strings.HasPrefix(ev.Note, wantNote) || !strings.Contains(ev.Note, "Run the pod in the ComputeDomain's namespace"):
		t.Errorf("note %q, want it to start with %q and say what to do", ev.Note, wantNote)
	}

	// More retries within the minute; the events of all of them would have been posted by now
	// (each is written within milliseconds), so a window of a few seconds shows none came.
	retry(3)
	e.Consistently(3*time.Second, "after 8 prepares: one event without a series", func() (bool, error) {
		evs, err := e.podEvents(pod, kubeletplugin.ReasonComputeDomainInOtherNamespace)
		if err != nil {
			return false, err
		}
		if len(evs) != 1 || evs[0].Series != nil {
			return false, fmt.Errorf("%d events (%+v), want one without a series", len(evs), evs)
		}
		return true, nil
	})
}
