// Package debugbundle runs `cdplane debug bundle` against a real kube-apiserver: a plane's
// controller Deployment, a kubelet-plugin pod and a daemon pod with no kubelet behind them (their
// logs and execs cannot be had: the bundle records that and goes on), a ComputeDomain with a
// token planted in an annotation, its clique and channel claim, and a Secret in the driver
// namespace. No controller runs: the test writes what the components would.
package debugbundle

import (
	"os"
	"testing"

	"cdplane/internal/testutil/cluster"
)

var testCluster *cluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(cluster.Main(m, cluster.Options{}, &testCluster))
}
