// Package controller tests the ComputeDomain controller and the node daemon together against a
// real kube-apiserver and kube-controller-manager (garbage collection). Tests play the kubelet:
// they create the nodes and daemon pods, run daemons in-process with the simulated IMEX, and
// set pod IPs and readiness from the daemon's check, as a kubelet would.
package controller

import (
	"os"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"cdplane/internal/testutil/cluster"
)

var testCluster *cluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(cluster.Main(m, cluster.Options{ControllerManager: true, Controllers: []string{"garbagecollector"}}, &testCluster))
}

func init() {
	ctrl.SetLogger(logr.Discard())
}
