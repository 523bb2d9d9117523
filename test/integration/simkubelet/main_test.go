// Package simkubelet tests the simulated kubelet (internal/sim/kubelet) against a real
// kube-apiserver, kube-scheduler and kube-controller-manager (node lifecycle, resource
// claims): one simulated kubelet with two nodes serves every test of the binary; each test
// owns its namespace.
package simkubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"cdplane/internal/sim/kubelet"
	"cdplane/internal/testutil/cluster"
)

var (
	testCluster *cluster.Cluster
	sim         *kubelet.Kubelet
	kube        kubernetes.Interface
	stateDir    string
	binDir      string
)

// The simulated nodes.
const (
	nodeA = "sk-a"
	nodeB = "sk-b"
)

// Image of the test's process-runner container (a shell script in binDir).
const sleeperImage = "sim-test/sleeper:1"

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	c, err := cluster.Start(ctx, cluster.Options{
		Scheduler: true, ControllerManager: true,
		// Node lifecycle lifts the not-ready taint of Ready nodes; resourceclaim makes claims
		// from templates and drops reservations of deleted pods.
		Controllers: []string{"node-lifecycle-controller", "resourceclaim-controller", "garbage-collector-controller"},
		// The apiserver reaches the simulated kubelets' log endpoints by their InternalIP.
		APIServerArgs: map[string][]string{"kubelet-preferred-address-types": {"InternalIP"}},
	})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	testCluster = c
	code := runKubelet(m)
	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the cluster:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// runKubelet starts the simulated kubelet for the tests.
func runKubelet(m *testing.M) int {
	var err error
	// Unix socket paths are limited to 108 bytes: a short directory, not t.TempDir().
	if stateDir, err = os.MkdirTemp("", "sk"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(stateDir)
	binDir = filepath.Join(stateDir, "bin")
	if err := writeSleeper(binDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kube = kubernetes.NewForConfigOrDie(testCluster.Config)
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods: resource.MustParse("110"),
	}
	sim, err = kubelet.New(kubelet.Config{
		RESTConfig: testCluster.Config, StateDir: stateDir,
		Nodes: []kubelet.NodeSpec{
			{Name: nodeA, InternalIP: "127.10.0.1", Capacity: capacity, Labels: map[string]string{"sim.cdplane.io/test": "a"}},
			{Name: nodeB, InternalIP: "127.10.0.2", Capacity: capacity},
		},
		Runner:             kubelet.NewProcessRouter(map[string]string{kubelet.ImageRepository(sleeperImage): binDir}, ""),
		LeaseRenewInterval: 2 * time.Second,
		RestartBackoff:     wait.Backoff{Duration: 200 * time.Millisecond, Cap: time.Second},
		PrepareBackoff:     wait.Backoff{Duration: 200 * time.Millisecond, Cap: 2 * time.Second},
		PluginPollInterval: 200 * time.Millisecond,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	logger := klog.Background().V(0)
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan error, 1)
	go func() { done <- sim.Run(ctx) }()
	select {
	case <-sim.Started():
	case err := <-done:
		fmt.Fprintln(os.Stderr, "simulated kubelet:", err)
		cancel()
		return 1
	case <-time.After(2 * time.Minute):
		fmt.Fprintln(os.Stderr, "simulated kubelet did not start in 2 minutes")
		cancel()
		return 1
	}
	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "simulated kubelet:", err)
		code = 1
	}
	return code
}

// writeSleeper writes the sleeper "image": it prints its arguments, writes its pid to the
// file named by its first argument, ignores SIGTERM when its second argument is
// "ignore-term", and runs until killed.
func writeSleeper(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	script := `#!/bin/sh
echo "sleeper $*"
if [ "$2" = ignore-term ]; then trap '' TERM; fi
echo $$ > "$1"
while :; do sleep 0.2; done
`
	return os.WriteFile(filepath.Join(dir, "sleeper"), []byte(script), 0o755)
}
