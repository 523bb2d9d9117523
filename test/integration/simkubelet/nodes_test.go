package simkubelet

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"cdplane/internal/testutil"
)

// TestNodesRegisterAndStayReady: both nodes are registered with their labels, addresses,
// capacity and log port; kube-controller-manager's node lifecycle controller sees them healthy
// (it lifts the not-ready taint), and their Leases keep being renewed.
func TestNodesRegisterAndStayReady(t *testing.T) {
	t.Parallel()
	for name, ip := range map[string]string{nodeA: "127.10.0.1", nodeB: "127.10.0.2"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var node *corev1.Node
			testutil.Eventually(t, 90*time.Second, "node "+name+" Ready and untainted", func() (bool, error) {
				var err error
				node, err = kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				ready := false
				for _, c := range node.Status.Conditions {
					if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
						ready = true
					}
				}
				return ready && len(node.Spec.Taints) == 0, fmt.Errorf("conditions %v, taints %v", node.Status.Conditions, node.Spec.Taints)
			})
			if got := node.Labels[corev1.LabelHostname]; got != name {
				t.Errorf("hostname label %q, want %q", got, name)
			}
			if name == nodeA && node.Labels["sim.cdplane.io/test"] != "a" {
				t.Errorf("node labels %v lack the configured label", node.Labels)
			}
			addrs := map[corev1.NodeAddressType]string{}
			for _, a := range node.Status.Addresses {
				addrs[a.Type] = a.Address
			}
			if addrs[corev1.NodeInternalIP] != ip || addrs[corev1.NodeHostName] != name {
				t.Errorf("addresses %v, want InternalIP %s and Hostname %s", node.Status.Addresses, ip, name)
			}
			if node.Status.DaemonEndpoints.KubeletEndpoint.Port == 0 {
				t.Error("no kubelet port in status.daemonEndpoints")
			}
			if pods := node.Status.Allocatable[corev1.ResourcePods]; pods.Value() != 110 {
				t.Errorf("allocatable pods %s, want 110", pods.String())
			}

			lease, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctxFor(t), name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("lease: %v", err)
			}
			if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != name || lease.Spec.RenewTime == nil {
				t.Fatalf("lease spec %+v", lease.Spec)
			}
			first := lease.Spec.RenewTime.Time
			// Renewed every 2s (±10%) in this suite: two renewals within 10s.
			renewals := 0
			last := first
			testutil.Eventually(t, 10*time.Second, "lease of "+name+" renewed twice", func() (bool, error) {
				l, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				if l.Spec.RenewTime.After(last) {
					renewals++
					last = l.Spec.RenewTime.Time
				}
				return renewals >= 2, fmt.Errorf("renewed %s times since %s", strconv.Itoa(renewals), first)
			})
		})
	}
}
