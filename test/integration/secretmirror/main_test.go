// Package secretmirror tests the Secret mirror against a real kube-apiserver and etcd. Each test
// owns its source namespace, its target namespaces, its control-plane id (or, for the legacy
// plane, its namespace selector) and its own controller manager, so tests run in parallel
// without seeing each other's Secrets. The managers' resync period is 10 hours: whatever
// converges in a test converged through watches, the start-up replay or retries.
package secretmirror

import (
	"os"
	"testing"

	"cdplane/internal/testutil/cluster"
)

var testCluster *cluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(cluster.Main(m, cluster.Options{}, &testCluster))
}
