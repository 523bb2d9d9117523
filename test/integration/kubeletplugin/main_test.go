// Package kubeletplugin tests the compute-domain.nvidia.com kubelet plugin against a real
// kube-apiserver and kube-scheduler. Tests play the kubelet: they register with the plugin and
// call NodePrepareResources / NodeUnprepareResources over its real gRPC sockets, and play the
// controller: they write the ComputeDomains, cliques and claim allocations the plugin reads.
package kubeletplugin

import (
	"os"
	"testing"

	"cdplane/internal/testutil/cluster"
)

var testCluster *cluster.Cluster

func TestMain(m *testing.M) {
	code := cluster.Main(m, cluster.Options{Scheduler: true}, &testCluster)
	removeBinary()
	os.Exit(code)
}
