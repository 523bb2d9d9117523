package kubeletplugin

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin/failure"
)

// podEventHints say, per reason, what the pod's owner can do.
var podEventHints = map[string]string{
	failure.ReasonComputeDomainNotFound: "The ComputeDomain was deleted, or the claim was not made from a current ComputeDomain's " +
		"ResourceClaimTemplate: create the ComputeDomain, then recreate the pod with a claim from its template (spec.channel.resourceClaimTemplate.name).",
	failure.ReasonComputeDomainInOtherNamespace: "Run the pod in the ComputeDomain's namespace, or create a ComputeDomain in the pod's " +
		"namespace and use the ResourceClaimTemplate it generates.",
	failure.ReasonComputeDomainDeleting: "The ComputeDomain is being deleted, and its IMEX daemons with it: delete the pod, or wait until " +
		"the ComputeDomain is gone, create it again and recreate the pod.",
	failure.ReasonComputeDomainConfigMissing: "A channel request needs a ComputeDomainChannelConfig naming its ComputeDomain: use the " +
		"ResourceClaimTemplate the ComputeDomain generates, and recreate the pod.",
	failure.ReasonInvalidComputeDomainConfig: "Fix the claim's opaque config for driver " + cdv1beta1.DriverName + " (or use the " +
		"ResourceClaimTemplate the ComputeDomain generates), and recreate the pod.",
	failure.ReasonConflictingComputeDomainConfig: "One claim holds devices of one kind, of one ComputeDomain, in one allocation mode: " +
		"split the requests into separate claims, or use the ResourceClaimTemplate the ComputeDomain generates.",
	failure.ReasonNodeServesOtherComputeDomain: "A node serves one ComputeDomain at a time and another one's workload runs on this node: " +
		"the pod starts once that workload leaves the node. Keep the two ComputeDomains' pods on different nodes (pod " +
		"anti-affinity), or delete the pod to have it placed again.",
}

const (
	// PodEventInterval is the least time between two events of one reason on one pod: the
	// kubelet retries a failing prepare every few seconds, and each retry must not become an
	// event (nor a series update) in the API.
	PodEventInterval = time.Minute
	// UserErrorGrace is how long a retryable user-fixable failure of a claim must last before
	// it is posted: a domain created a moment ago may not be in the plugin's cache yet, and the
	// node label of a domain whose workload just left may still be there.
	UserErrorGrace = 30 * time.Second
	// podEventMemory is how long a claim's failure is remembered without a new one: longer than
	// the kubelet's longest back-off between two prepares of a pod.
	podEventMemory = 30 * time.Minute
	// podEventAction is the events' action (events.k8s.io requires one).
	podEventAction = "PrepareResources"
	// maxPodEventNote is the events.k8s.io/v1 limit on a note, in bytes.
	maxPodEventNote = 1024
)

// podEvents posts a Warning event on each pod a claim is reserved for when its prepare fails
// with a failure.UserError, at most one per pod and reason per PodEventInterval (the broadcaster counts
// repeats of a posted event as a series; those it sees are already spaced). A retryable failure
// is posted once it has lasted UserErrorGrace. State is in memory, per node; nil posts nothing.
type podEvents struct {
	rec   events.EventRecorder
	clock clock.PassiveClock
	node  string

	mu sync.Mutex
	// posted is when the last event of a pod and reason was posted.
	posted map[podReason]time.Time
	// failing is, per claim and reason, when its retryable failure was first and last seen.
	failing map[claimReason]seenSpan
}

type podReason struct {
	pod    types.UID
	reason string
}

type claimReason struct {
	claim  types.UID
	reason string
}

type seenSpan struct{ first, last time.Time }

func newPodEvents(rec events.EventRecorder, clk clock.PassiveClock, node string) *podEvents {
	return &podEvents{rec: rec, clock: clk, node: node, posted: map[podReason]time.Time{}, failing: map[claimReason]seenSpan{}}
}

// prepareFailed is called with the error of a claim's failed prepare; it posts the events that
// are due and returns the pods posted on.
func (p *podEvents) prepareFailed(ctx context.Context, claim *resourcev1.ResourceClaim, err error) []string {
	if p == nil {
		return nil
	}
	ue, ok := failure.UserErrorOf(err)
	if !ok {
		return nil
	}
	pods := reservedPods(claim)
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forgetLocked(now)
	if failure.IsRetryable(err) {
		key := claimReason{claim.UID, ue.Reason}
		span, seen := p.failing[key]
		if !seen {
			span.first = now
		}
		span.last = now
		p.failing[key] = span
		if now.Sub(span.first) < UserErrorGrace {
			return nil
		}
	}
	logger := klog.FromContext(ctx)
	var posted []string
	for _, pod := range pods {
		key := podReason{pod.UID, ue.Reason}
		if last, ok := p.posted[key]; ok && now.Sub(last) < PodEventInterval {
			continue
		}
		p.posted[key] = now
		p.rec.Eventf(pod, claimRef(claim), corev1.EventTypeWarning, ue.Reason, podEventAction, "%s", podEventNote(claim, p.node, ue))
		logger.V(1).Info("Posted an event on the claim's pod", "pod", klog.KRef(pod.Namespace, pod.Name), "reason", ue.Reason)
		posted = append(posted, pod.Name)
	}
	return posted
}

// prepared forgets the claim's failures: it was prepared.
func (p *podEvents) prepared(claim types.UID) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.failing {
		if k.claim == claim {
			delete(p.failing, k)
		}
	}
}

// forgetLocked drops what can no longer hold an event back.
func (p *podEvents) forgetLocked(now time.Time) {
	for k, t := range p.posted {
		if now.Sub(t) >= PodEventInterval {
			delete(p.posted, k)
		}
	}
	for k, s := range p.failing {
		if now.Sub(s.last) >= podEventMemory {
			delete(p.failing, k)
		}
	}
}

// reservedPods are the pods in the claim's status.reservedFor: those the kubelet prepares it
// for. Other consumers get no event.
func reservedPods(claim *resourcev1.ResourceClaim) []*corev1.ObjectReference {
	var out []*corev1.ObjectReference
	for _, r := range claim.Status.ReservedFor {
		if r.APIGroup == "" && r.Resource == "pods" {
			out = append(out, &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: claim.Namespace, Name: r.Name, UID: r.UID})
		}
	}
	return out
}

func claimRef(claim *resourcev1.ResourceClaim) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: resourcev1.SchemeGroupVersion.String(), Kind: "ResourceClaim",
		Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}
}

// podEventNote names the claim, its domain, the node and the failure, then what to do, within
// the API's limit.
func podEventNote(claim *resourcev1.ResourceClaim, node string, ue *failure.UserError) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Claim %s/%s", claim.Namespace, claim.Name)
	if ue.Domain != "" {
		fmt.Fprintf(&b, " of ComputeDomain %s", ue.Domain)
	}
	fmt.Fprintf(&b, " cannot be prepared on node %s: %s. %s", node, ue.Err.Error(), podEventHints[ue.Reason])
	return truncateBytes(b.String(), maxPodEventNote)
}

// truncateBytes keeps at most n bytes of s, cut at a rune boundary.
func truncateBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
