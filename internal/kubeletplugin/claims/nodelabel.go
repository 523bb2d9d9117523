package claims

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin/checkpoint"
	"cdplane/internal/kubeletplugin/devices"
	"cdplane/internal/kubeletplugin/failure"
)

// addLabelDecision says whether a channel prepare for domain want must label the node whose
// ComputeDomain label is current. A node serves one domain at a time: a label naming another
// domain refuses the claim with a retryable error (that domain's workloads may leave).
func addLabelDecision(node, current, want string) (bool, error) {
	switch current {
	case "":
		return true, nil
	case want:
		return false, nil
	default:
		return false, &failure.RetryableError{Err: &nodeServesOtherError{node: node, current: current, want: want}}
	}
}

// labelRefusal tags AddDomain's refusal of a claim of domain ("<namespace>/<name>") because the
// node serves another as a failure.UserError; other errors (reading or patching the node) pass as they
// are.
func labelRefusal(err error, domain string) error {
	var busy *nodeServesOtherError
	if errors.As(err, &busy) {
		return failure.UserFixable(err, failure.ReasonNodeServesOtherComputeDomain, domain)
	}
	return err
}

// nodeServesOtherError is addLabelDecision's refusal: node serves domain current, not want.
type nodeServesOtherError struct{ node, current, want string }

func (e *nodeServesOtherError) Error() string {
	return fmt.Sprintf("node %s already serves ComputeDomain %s; a node serves one ComputeDomain at a time, refusing ComputeDomain %s",
		e.node, e.current, e.want)
}

// removeLabelDecision says whether unpreparing claim self of domain may remove the node's
// label: only when the label names that domain (it is ours) and no other channel claim of the
// same domain is still prepared or being prepared on this node.
func removeLabelDecision(current, domain string, self types.UID, claims map[types.UID]checkpoint.ClaimEntry) bool {
	if current == "" || current != domain {
		return false
	}
	for uid, e := range claims {
		if uid == self || e.Kind != string(devices.KindChannel) || e.DomainID != domain || e.State == checkpoint.PrepareAborted {
			continue
		}
		return false
	}
	return true
}

// NodeLabeler edits this node's labels with fresh reads and optimistic concurrency.
type NodeLabeler struct {
	// API is uncached: fresh reads and writes.
	API client.Client
	// Node is this node's name.
	Node string
}

// change reads the node, lets decide compute the wanted value of the label key (ok false:
// leave it), and patches it with the read resourceVersion, retrying on conflicts. With cached,
// the first read is served from the apiserver's watch cache (resourceVersion "0"), the ones
// after a conflict from etcd; without, every read is from etcd.
func (l NodeLabeler) change(ctx context.Context, key string, cached bool, decide func(current string) (value string, ok bool, err error)) error {
	fromCache := cached
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		var opts []client.GetOption
		if fromCache {
			opts = append(opts, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: "0"}})
			fromCache = false
		}
		if err := l.API.Get(ctx, types.NamespacedName{Name: l.Node}, n, opts...); err != nil {
			return fmt.Errorf("reading node %s: %w", l.Node, err)
		}
		value, ok, err := decide(n.Labels[key])
		if err != nil || !ok {
			return err
		}
		orig := n.DeepCopy()
		if value == "" {
			delete(n.Labels, key)
		} else {
			if n.Labels == nil {
				n.Labels = map[string]string{}
			}
			n.Labels[key] = value
		}
		return l.API.Patch(ctx, n, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	})
}

// AddDomain labels the node for the domain, or refuses when it serves another. Its first read
// of the node is from the watch cache: a channel prepare waiting for its daemon is retried by
// the kubelet every few seconds and comes here each time (a no-op once the label is there), and
// in a large burst such reads from etcd would load it for nothing. A write is still based on
// the version it read (optimistic lock), and a cache just behind an edit of the label is caught
// up at the prepare's next try: a label seen that is gone, or one not seen yet, only delays
// that prepare.
func (l NodeLabeler) AddDomain(ctx context.Context, domain string) error {
	return l.change(ctx, cdv1beta1.ComputeDomainLabel, true, func(current string) (string, bool, error) {
		add, err := addLabelDecision(l.Node, current, domain)
		return domain, add, err
	})
}

// RemoveDomain removes the node's label when removeLabelDecision allows it. It reads from
// etcd: a cache behind the label's write would let the label stay after the node's last claim.
func (l NodeLabeler) RemoveDomain(ctx context.Context, domain string, self types.UID, claims map[types.UID]checkpoint.ClaimEntry) error {
	return l.change(ctx, cdv1beta1.ComputeDomainLabel, false, func(current string) (string, bool, error) {
		return "", removeLabelDecision(current, domain, self, claims), nil
	})
}

// SetClique sets the optional nvidia.com/gpu.clique label, removing it on a node without a
// fabric.
func (l NodeLabeler) SetClique(ctx context.Context, cliqueID string) error {
	return l.change(ctx, cdv1beta1.GPUCliqueNodeLabel, false, func(current string) (string, bool, error) {
		return cliqueID, current != cliqueID, nil
	})
}
