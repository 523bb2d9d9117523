package kubeletplugin

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
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
		return false, &RetryableError{Err: &nodeServesOtherError{node: node, current: current, want: want}}
	}
}

// labelRefusal tags addDomain's refusal of a claim of domain ("<namespace>/<name>") because the
// node serves another as a UserError; other errors (reading or patching the node) pass as they
// are.
func labelRefusal(err error, domain string) error {
	var busy *nodeServesOtherError
	if errors.As(err, &busy) {
		return userFixable(err, ReasonNodeServesOtherComputeDomain, domain)
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
func removeLabelDecision(current, domain string, self types.UID, claims map[types.UID]ClaimEntry) bool {
	if current == "" || current != domain {
		return false
	}
	for uid, e := range claims {
		if uid == self || e.Kind != string(KindChannel) || e.DomainID != domain || e.State == PrepareAborted {
			continue
		}
		return false
	}
	return true
}

// nodeLabeler edits this node's labels with fresh reads and optimistic concurrency.
type nodeLabeler struct {
	api  client.Client
	node string
}

// change reads the node, lets decide compute the wanted value of the label key (ok false:
// leave it), and patches it with the read resourceVersion, retrying on conflicts.
func (l nodeLabeler) change(ctx context.Context, key string, decide func(current string) (value string, ok bool, err error)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := l.api.Get(ctx, types.NamespacedName{Name: l.node}, n); err != nil {
			return fmt.Errorf("reading node %s: %w", l.node, err)
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
		return l.api.Patch(ctx, n, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	})
}

// addDomain labels the node for the domain, or refuses when it serves another.
func (l nodeLabeler) addDomain(ctx context.Context, domain string) error {
	return l.change(ctx, cdv1beta1.ComputeDomainLabel, func(current string) (string, bool, error) {
		add, err := addLabelDecision(l.node, current, domain)
		return domain, add, err
	})
}

// removeDomain removes the node's label when removeLabelDecision allows it.
func (l nodeLabeler) removeDomain(ctx context.Context, domain string, self types.UID, claims map[types.UID]ClaimEntry) error {
	return l.change(ctx, cdv1beta1.ComputeDomainLabel, func(current string) (string, bool, error) {
		return "", removeLabelDecision(current, domain, self, claims), nil
	})
}

// setClique sets the optional nvidia.com/gpu.clique label, removing it on a node without a
// fabric.
func (l nodeLabeler) setClique(ctx context.Context, cliqueID string) error {
	return l.change(ctx, cdv1beta1.GPUCliqueNodeLabel, func(current string) (string, bool, error) {
		return cliqueID, current != cliqueID, nil
	})
}
