// Package status runs `cdplane status` against a real kube-apiserver: a control plane's
// controller Deployment, kubelet-plugin pods and leader Lease, and a ComputeDomain whose cliques,
// daemon pods, node labels, channel claims and events show nodes holding it back, as the
// controller, the daemons, the kubelet plugin and the kubelet leave them. No controller runs: the
// test writes what they would, and checks what the command says about it.
package status

import (
	"os"
	"testing"

	"cdplane/internal/testutil/cluster"
)

var testCluster *cluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(cluster.Main(m, cluster.Options{}, &testCluster))
}
