package kubeletplugin

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"cdplane/internal/kubeletplugin/claims"
	"cdplane/internal/kubeletplugin/failure"
	"cdplane/internal/kubeletplugin/readiness"
	"cdplane/internal/testutil"
)

// recordedEvent is one Eventf call.
type recordedEvent struct {
	Pod, Related, Type, Reason, Action, Note string
}

// captureRecorder records Eventf calls.
type captureRecorder struct {
	mu     sync.Mutex
	events []recordedEvent
}

func (r *captureRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ref, rel := regarding.(*corev1.ObjectReference), related.(*corev1.ObjectReference)
	r.events = append(r.events, recordedEvent{
		Pod: ref.Kind + " " + ref.Namespace + "/" + ref.Name + " " + string(ref.UID), Related: rel.Kind + " " + rel.Namespace + "/" + rel.Name,
		Type: eventtype, Reason: reason, Action: action, Note: fmt.Sprintf(note, args...),
	})
}

func (r *captureRecorder) take() []recordedEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

// reasons lists the pod and reason of each event.
func reasons(evs []recordedEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Pod+" "+e.Reason)
	}
	return out
}

func podClaim(name string, pods ...string) *resourcev1.ResourceClaim {
	w := testutil.MakeResourceClaim(name, "team").UID(types.UID(name + "-uid"))
	for _, p := range pods {
		w = w.ReservedFor(p, types.UID(p+"-uid"))
	}
	return w.Obj()
}

// domainMetaIn is a cached ComputeDomain's metadata.
func domainMetaIn(ns, name string) *metav1.PartialObjectMetadata {
	m := readiness.DomainMeta()
	m.Namespace, m.Name, m.UID = ns, name, testUID
	return m
}

var (
	wrongNamespace = claims.CheckDomain("team", "c", testUID, domainMetaIn("other", "cd"), nil)
	notFound       = claims.CheckDomain("team", "c", testUID, nil, &failure.RetryableError{Err: &readiness.DomainNotFoundError{UID: testUID}})
)

// TestPodEventsRateLimited: a permanent user-fixable failure posts at once on every pod of the
// claim, then at most once per pod and reason per PodEventInterval however often the kubelet
// retries; another reason, or another pod, is limited apart.
func TestPodEventsRateLimited(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rec := &captureRecorder{}
	p := newPodEvents(rec, clk, "node-1")
	ctx := context.Background()
	claim := podClaim("c", "worker-0", "worker-1")

	p.prepareFailed(ctx, claim, failure.Tag(failure.WrongNamespace, wrongNamespace))
	want := []string{"Pod team/worker-0 worker-0-uid ComputeDomainInOtherNamespace", "Pod team/worker-1 worker-1-uid ComputeDomainInOtherNamespace"}
	if diff := cmp.Diff(want, reasons(rec.take())); diff != "" {
		t.Fatalf("first failure (-want +got):\n%s", diff)
	}
	// The kubelet retries every few seconds for a minute: nothing more.
	for range 20 {
		clk.SetTime(clk.Now().Add(2900 * time.Millisecond))
		p.prepareFailed(ctx, claim, wrongNamespace)
	}
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("retries within %s posted %v, want nothing", PodEventInterval, reasons(got))
	}
	// Another reason on the same pods is limited apart.
	p.prepareFailed(ctx, claim, failure.UserFixable(failure.Permanentf("bad"), failure.ReasonInvalidComputeDomainConfig, ""))
	if got := reasons(rec.take()); len(got) != 2 || !strings.HasSuffix(got[0], failure.ReasonInvalidComputeDomainConfig) {
		t.Fatalf("another reason posted %v, want one event per pod", got)
	}
	// Past the interval since the first: one more each.
	clk.SetTime(clk.Now().Add(2 * time.Second))
	p.prepareFailed(ctx, claim, wrongNamespace)
	if diff := cmp.Diff(want, reasons(rec.take())); diff != "" {
		t.Fatalf("after %s (-want +got):\n%s", PodEventInterval, diff)
	}
	// A new pod of the claim (the old ones are limited still).
	p.prepareFailed(ctx, podClaim("c", "worker-0", "worker-1", "worker-2"), wrongNamespace)
	if diff := cmp.Diff([]string{"Pod team/worker-2 worker-2-uid ComputeDomainInOtherNamespace"}, reasons(rec.take())); diff != "" {
		t.Fatalf("a new pod (-want +got):\n%s", diff)
	}
}

// TestPodEventsOfRetryableFailuresWaitForGrace: a retryable user-fixable failure is posted only
// once the claim has failed for that reason for UserErrorGrace; a prepare that succeeds in
// between starts it again.
func TestPodEventsOfRetryableFailuresWaitForGrace(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rec := &captureRecorder{}
	p := newPodEvents(rec, clk, "node-1")
	ctx := context.Background()
	claim := podClaim("c", "worker-0")

	step := func(d time.Duration) []string {
		clk.SetTime(clk.Now().Add(d))
		p.prepareFailed(ctx, claim, failure.Tag(failure.DomainNotFound, notFound))
		return reasons(rec.take())
	}
	for i, d := range []time.Duration{0, 10 * time.Second, 10 * time.Second, 9 * time.Second} {
		if got := step(d); len(got) != 0 {
			t.Fatalf("retry %d, within %s of the first failure: posted %v", i, UserErrorGrace, got)
		}
	}
	if got := step(time.Second); len(got) != 1 || !strings.HasSuffix(got[0], failure.ReasonComputeDomainNotFound) {
		t.Fatalf("after %s: posted %v, want one %s", UserErrorGrace, got, failure.ReasonComputeDomainNotFound)
	}
	if got := step(5 * time.Second); len(got) != 0 {
		t.Fatalf("the next retry posted %v", got)
	}
	// Prepared (the domain appeared in the cache), then failing again: a new grace.
	p.prepared(claim.UID)
	clk.SetTime(clk.Now().Add(2 * PodEventInterval))
	if got := step(0); len(got) != 0 {
		t.Fatalf("first failure after a success posted %v", got)
	}
	if got := step(UserErrorGrace); len(got) != 1 {
		t.Fatalf("after a new grace posted %v, want one event", got)
	}
}

// TestPodEventsOnlyForUserFixableFailures: operator-side failures and consumers other than pods
// get no event.
func TestPodEventsOnlyForUserFixableFailures(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rec := &captureRecorder{}
	p := newPodEvents(rec, clk, "node-1")
	ctx := context.Background()
	claim := podClaim("c", "worker-0")
	for _, err := range []error{
		failure.Tag(failure.IMEXNotReady, failure.Retryablef("the ComputeDomain daemon on node n1 is not Ready after 10s")),
		failure.Tag(failure.Driver, failure.Permanentf("NVIDIA driver root has no nvidia-imex")),
		failure.Tag(failure.CliqueUnknown, failure.Retryablef("NVLink fabric registration in progress")),
	} {
		clk.SetTime(clk.Now().Add(time.Hour))
		p.prepareFailed(ctx, claim, err)
	}
	other := podClaim("c")
	other.Status.ReservedFor = append(other.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{APIGroup: "example.com", Resource: "jobs", Name: "j", UID: "j-uid"})
	p.prepareFailed(ctx, other, wrongNamespace)
	if got := rec.take(); len(got) != 0 {
		t.Errorf("posted %v, want nothing", reasons(got))
	}
	var none *podEvents
	none.prepareFailed(ctx, claim, wrongNamespace) // a nil emitter posts nothing
	none.prepared(claim.UID)
}

// TestPodEventContent: a Warning regarding the pod, related to the claim, whose note names the
// claim, the domain, the node, the failure and what to do, within the API's 1 KiB.
func TestPodEventContent(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rec := &captureRecorder{}
	p := newPodEvents(rec, clk, "node-1")
	p.prepareFailed(context.Background(), podClaim("c", "worker-0"), wrongNamespace)
	got := rec.take()
	if len(got) != 1 {
		t.Fatalf("posted %v, want one event", got)
	}
	want := recordedEvent{
		Pod: "Pod team/worker-0 worker-0-uid", Related: "ResourceClaim team/c", Type: corev1.EventTypeWarning,
		Reason: failure.ReasonComputeDomainInOtherNamespace, Action: "PrepareResources",
		Note: "Claim team/c of ComputeDomain other/cd cannot be prepared on node node-1: claim team/c is in namespace team, " +
			"but its ComputeDomain cd is in namespace other: a channel claim must be in its ComputeDomain's namespace. " +
			"Run the pod in the ComputeDomain's namespace, or create a ComputeDomain in the pod's namespace and use the ResourceClaimTemplate it generates.",
	}
	if diff := cmp.Diff(want, got[0]); diff != "" {
		t.Errorf("event (-want +got):\n%s", diff)
	}

	long := failure.UserFixable(failure.Permanentf("%s", strings.Repeat("é", 600)), failure.ReasonInvalidComputeDomainConfig, "")
	note := podEventNote(podClaim("c"), "node-1", mustUserError(t, long))
	if len(note) > maxPodEventNote || !strings.HasPrefix(note, "Claim team/c cannot be prepared on node node-1: éé") || !strings.HasSuffix(note, "é") {
		t.Errorf("long note: %d bytes, %q…", len(note), note[:60])
	}
	for _, reason := range failure.PodEventReasons {
		if podEventHints[reason] == "" {
			t.Errorf("reason %s has no hint", reason)
		}
	}
}

func mustUserError(t *testing.T, err error) *failure.UserError {
	t.Helper()
	ue, ok := failure.UserErrorOf(err)
	if !ok {
		t.Fatalf("%v is not a failure.UserError", err)
	}
	return ue
}
