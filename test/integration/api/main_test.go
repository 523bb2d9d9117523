// Package api tests the ComputeDomain and ComputeDomainClique CRDs against a real kube-apiserver
// and kube-controller-manager: validation, defaults, server-side apply and garbage collection.
package api

import (
	"os"
	"testing"

	"cdplane/internal/testutil/cluster"
)

var testCluster *cluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(cluster.Main(m, cluster.Options{ControllerManager: true}, &testCluster))
}
