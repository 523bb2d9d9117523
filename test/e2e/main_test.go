// Package e2e runs scenarios on one shared simulated cluster (`cdplane sim up`, two planes
// sharing 12 nodes in racks of 3) with every component running as it does in a cluster: the
// controller and the kubelet plugins installed by the charts, run by the simulated kubelet as
// processes, the daemons running the simulated IMEX, workloads as no-op containers whose logs
// record what they were given. Each scenario asserts what a user would check: objects through
// the API (kubectl get), container logs through the apiserver (kubectl logs), files on the
// simulated nodes. Run with `make test-e2e` (CDPLANE_E2E=1); skipped otherwise.
package e2e

import (
	"cdplane/internal/scheme"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"cdplane/internal/sim"
)

const (
	planeA = "e2e-a"
	planeB = "e2e-b"
	// channels each simulated node publishes.
	numChannels = 16
)

var (
	simState *sim.State
	stateDir string
	c        client.Client
	cs       *kubernetes.Clientset
)

func TestMain(m *testing.M) {
	if os.Getenv("CDPLANE_E2E") != "1" {
		fmt.Println("e2e: skipped (run `make test-e2e`, or set CDPLANE_E2E=1)")
		os.Exit(0)
	}
	ctrl.SetLogger(logr.Discard())
	os.Exit(run(m))
}

func run(m *testing.M) int {
	stateDir = fmt.Sprintf("/tmp/cdp-e2e-%d", os.Getpid())
	start := time.Now()
	st, err := sim.Up(context.Background(), sim.Options{
		Topology: sim.Topology{Nodes: 12, RackSize: 3, GPUsPerNode: 4, Planes: []string{planeA, planeB}},
		StateDir: stateDir, NumChannels: numChannels, Out: os.Stderr, Timeout: 5 * time.Minute,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: sim up:", err)
		if prev, _ := sim.Load(stateDir); prev != nil {
			_ = sim.Down(prev, stateDir, os.Stderr)
		}
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: simulated cluster up in %s\n", time.Since(start).Round(time.Second))
	simState = st
	defer func() {
		if err := sim.Down(st, stateDir, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: sim down:", err)
		}
	}()
	cfg, err := clientcmd.BuildConfigFromFlags("", st.ControlPlane.Kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg.QPS, cfg.Burst = 50, 100
	if c, err = client.New(cfg, client.Options{Scheme: scheme.New()}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if cs, err = kubernetes.NewForConfig(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
