// Package e2e runs scenarios on one shared simulated cluster (`cdplane sim up`, two planes
// sharing 12 nodes in racks of 3) with every component running as it does in a cluster: the
// controller and the kubelet plugins installed by the charts, run by the simulated kubelet as
// processes, the daemons running the simulated IMEX, workloads as no-op containers whose logs
// record what they were given, or as the IMEX workload of workload_test.go, which finishes only
// once its node's IMEX is connected to every peer. Each scenario asserts what a user would
// check: objects through the API (kubectl get), container logs through the apiserver (kubectl
// logs), files on the simulated nodes, and what each node's simulated IMEX reports.
//
// Run with `make test-e2e` (CDPLANE_E2E=1). Without it every scenario is skipped, saying why
// (`go test -v ./test/e2e` lists them as SKIP). Each scenario sets up what it needs (it waits
// for the nodes it uses to be free) and leaves nothing behind, so scenarios pass alone
// (`-run`) and in any order (`-shuffle=on`).
package e2e

import (
	"cdplane/internal/scheme"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	// enableEnv turns the scenarios on.
	enableEnv = "CDPLANE_E2E"
	// kubernetesVersionEnv picks the simulated cluster's Kubernetes release (hack/k8s-bins.sh's
	// argument; empty: the newest supported). `make test-e2e-oldest` runs the scenarios that
	// matter most on the oldest supported release.
	kubernetesVersionEnv = "CDPLANE_E2E_KUBERNETES_VERSION"
)

var (
	simState *sim.State
	stateDir string
	c        client.Client
	cs       *kubernetes.Clientset
	// skipReason is why every scenario is skipped; empty when the simulated cluster runs.
	skipReason string
)

func TestMain(m *testing.M) {
	// A pod of an IMEX workload runs this test binary (workload_test.go): it is that workload
	// and nothing else.
	if os.Getenv(workloadEnv) != "" {
		os.Exit(workloadMain(os.Stdout))
	}
	if os.Getenv(enableEnv) != "1" {
		skipReason = fmt.Sprintf("e2e: %s is not 1, so no simulated cluster is started and every scenario is SKIPPED (run `make test-e2e`, or set %s=1)", enableEnv, enableEnv)
		fmt.Fprintln(os.Stderr, skipReason)
		os.Exit(m.Run())
	}
	ctrl.SetLogger(logr.Discard())
	os.Exit(run(m))
}

// e2eOnly skips the scenario, with the reason, when no simulated cluster runs. Every
// top-level scenario calls it first.
func e2eOnly(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}

func run(m *testing.M) int {
	stateDir = fmt.Sprintf("/tmp/cdp-e2e-%d", os.Getpid())
	start := time.Now()
	st, err := sim.Up(context.Background(), sim.Options{
		Topology: sim.Topology{Nodes: 12, RackSize: 3, GPUsPerNode: 4, Planes: []string{planeA, planeB}},
		StateDir: stateDir, NumChannels: numChannels, Out: os.Stderr, Timeout: 5 * time.Minute,
		KubernetesVersion: os.Getenv(kubernetesVersionEnv),
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
	sv, err := cs.Discovery().ServerVersion()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: reading the apiserver's version:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: kube-apiserver %s\n", sv.GitVersion)
	if want := os.Getenv(kubernetesVersionEnv); want != "" && !strings.HasPrefix(sv.GitVersion+".", "v"+strings.TrimPrefix(want, "v")+".") {
		fmt.Fprintf(os.Stderr, "e2e: %s=%s but the apiserver is %s\n", kubernetesVersionEnv, want, sv.GitVersion)
		return 1
	}
	// The IMEX workload's image: pods of image cdplane run the sim's binaries by name, and this
	// test binary is one of them under workloadProgram.
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.Symlink(self, filepath.Join(st.BinDir, workloadProgram)); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: installing the IMEX workload:", err)
		return 1
	}
	return m.Run()
}
