// Package secretmirror tests the Secret mirror against a real kube-apiserver and etcd. Each test
// owns its source namespace, its target namespaces, its control-plane id (or, for the legacy
// plane, its namespace selector) and its own controller manager, so tests run in parallel
// without seeing each other's Secrets. The managers' informer resync period is 10 hours and
// the mirror's ResyncInterval 10 minutes unless a test sets it: whatever converges in a test
// converged through watches, the start-up replay or retries, or, where a test shortens it, the
// mirror's periodic resync.
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
