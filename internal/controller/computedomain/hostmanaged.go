package computedomain

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"cdplane/internal/controller/membership"
	"cdplane/internal/features"
	"cdplane/internal/plane"
)

// Host-managed IMEX (features.IMEXHostManaged): the administrator runs nvidia-imex on every node
// as a host service, so a domain has no daemons. Membership keeps its rule — a node is a member
// when it carries the domain's label and the scheduler allocated one of the domain's channel
// claims there — and each member's entry comes from the node's kubelet-plugin pod instead of a
// daemon pod: its host IP (the host IMEX listens on the node's address), its readiness (the
// plugin's readiness probe is the host-IMEX check, `cdplane-kubelet-plugin check-host-imex`, the
// same check a channel prepare makes) and the node's clique label nvidia.com/gpu.clique (which
// the plugin keeps in this mode).

// PluginComponent is the app.kubernetes.io/name label of the kubelet-plugin pods, and, derived
// for the plane, the name of their DaemonSet.
const PluginComponent = "cdplane-kubelet-plugin"

// NodeCliqueLabel is the node label holding the node's clique (set by GPU feature discovery, and
// by the kubelet plugin with --node-clique-label).
const NodeCliqueLabel = "nvidia.com/gpu.clique"

func (r *Reconciler) hostManaged() bool { return r.opts.IMEXMode == features.IMEXHostManaged }

// PluginPodLabels selects the kubelet-plugin pods (with the plane's label, added by the cache).
func PluginPodLabels() map[string]string {
	return map[string]string{"app.kubernetes.io/name": PluginComponent}
}

// hostMembershipPods returns one membership.Pod per kubelet-plugin pod on a node of nodes (the
// nodes labelled for the domain). Only pods controlled by the plane's plugin DaemonSet count.
func (r *Reconciler) hostMembershipPods(ctx context.Context, nodes []metav1.PartialObjectMetadata) ([]membership.Pod, error) {
	cliques := make(map[string]string, len(nodes))
	for _, n := range nodes {
		cliques[n.Name] = n.Labels[NodeCliqueLabel]
	}
	pods := &corev1.PodList{}
	if err := r.client.List(ctx, pods, client.InNamespace(r.opts.DriverNamespace), client.MatchingLabels(PluginPodLabels()), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing kubelet-plugin pods: %w", err)
	}
	dsName := plane.Name(r.opts.ControlPlaneID, PluginComponent)
	var out []membership.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		clique, member := cliques[p.Spec.NodeName]
		if !member {
			continue
		}
		owner := metav1.GetControllerOf(p)
		info := membership.Pod{
			NodeName: p.Spec.NodeName, IP: p.Status.HostIP, CliqueID: clique, Labelled: true,
			Terminating: p.DeletionTimestamp != nil, Created: p.CreationTimestamp.Time,
			Owned: owner != nil && owner.Kind == "DaemonSet" && owner.Name == dsName,
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				info.Ready = c.Status == corev1.ConditionTrue
			}
		}
		out = append(out, info)
	}
	return out, nil
}
