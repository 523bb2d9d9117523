package e2e

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/features"
	"cdplane/internal/lifecycle"
	"cdplane/internal/plane"
	"cdplane/internal/sim/nodehost"
	"cdplane/internal/testutil"
)

// TestHostManagedIMEX runs one domain with IMEX as a host service. The administrator's
// nvidia-imex runs on every node of plane B (the simulated host service, each configured with
// its rack), and plane B is switched to host-managed mode with `cdplane apply plane`. A domain
// over two nodes of a rack then turns Ready with no daemon at all: its workloads get one channel
// (the domain asks for All; a host IMEX's channels are shared, so a domain gets one), and its
// status lists both nodes, Ready, at their node addresses. When one node's host IMEX stops, the
// plugin's readiness probe fails and that node and the domain turn NotReady; when it comes back,
// Ready again. The plane is put back as the sim runs it afterwards.
func TestHostManagedIMEX(t *testing.T) {
	e2eOnly(t)
	waitPlanesIdle(t, planeB)

	// The host services, stopped last.
	services := map[string]func(){}
	start := func(node string) {
		t.Helper()
		var self netip.Addr
		var peers []netip.Addr
		rack := -1
		for _, n := range simState.Nodes {
			if n.Name == node {
				self, rack = netip.MustParseAddr(n.InternalIP), n.Rack
			}
		}
		for _, n := range simState.Nodes {
			if n.Rack == rack && n.Name != node {
				peers = append(peers, netip.MustParseAddr(n.InternalIP))
			}
		}
		stop, err := nodehost.StartHostIMEX(filepath.Join(stateDir, "nodes", node), self, peers, testr.New(t).WithValues("hostIMEX", node))
		must(t, err)
		services[node] = func() { _ = stop(ctx()) }
	}
	t.Cleanup(func() {
		for _, stop := range services {
			stop()
		}
	})
	for _, n := range planeNodes(planeB, -1) {
		start(n)
	}

	m, err := lifecycle.New(lifecycle.Options{Getter: lifecycle.KubeconfigGetter(simState.ControlPlane.Kubeconfig, ""), Timeout: 3 * time.Minute, Wait: true})
	must(t, err)
	t.Cleanup(func() {
		if err := m.ApplyPlane(ctx(), planeB, simState.PlaneValues(), lifecycle.ResetValues); err != nil {
			t.Errorf("restoring plane %s: %v", planeB, err)
		}
		waitPlaneMode(t, planeB, false)
	})
	vals := simState.PlaneValues()
	vals["featureGates"] = map[string]any{string(features.HostManagedIMEXDaemon): true}
	vals["imex"] = map[string]any{"mode": string(features.IMEXHostManaged)}
	must(t, m.ApplyPlane(ctx(), planeB, vals, lifecycle.ResetValues))
	waitPlaneMode(t, planeB, true)

	racks := planeRacks(t, planeB)
	nodes := planeNodes(planeB, rackNumber(t, racks[0]))[:2]
	ns := namespace(t, planeB)
	cd := computeDomain(t, ns, "host", 2, cdv1beta1.AllocationModeAll)
	var pods []*corev1.Pod
	for i, n := range nodes {
		pods = append(pods, workerPod(t, ns, fmt.Sprintf("w%d", i), "host", n))
	}
	waitStatus(t, cd, cdv1beta1.StatusReady, 2*time.Minute)
	checkHostEntries(t, cd, nodes, map[string]string{})

	for _, p := range pods {
		p = waitPodRunning(t, p, time.Minute)
		if got := channelDevices(logs(t, p)); !slices.Equal(got, []string{"/dev/nvidia-caps-imex-channels/channel0"}) {
			t.Errorf("pod %s on %s got channels %v, want channel0 only", p.Name, p.Spec.NodeName, got)
		}
	}
	if d := daemonPods(t, planeB, cd); len(d) != 0 {
		t.Errorf("%d daemon pods in host-managed mode", len(d))
	}
	err = c.Get(ctx(), client.ObjectKey{Namespace: plane.Name(planeB, plane.DriverNamespaceLegacyName), Name: cdv1beta1.DaemonSetName(string(cd.UID))}, &appsv1.DaemonSet{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the domain's daemon DaemonSet: %v, want none", err)
	}

	// One node's host IMEX stops: its plugin's probe fails, the node and the domain turn NotReady.
	services[nodes[1]]()
	delete(services, nodes[1])
	waitStatus(t, cd, cdv1beta1.StatusNotReady, 2*time.Minute)
	checkHostEntries(t, cd, nodes, map[string]string{nodes[1]: cdv1beta1.StatusNotReady})
	start(nodes[1])
	waitStatus(t, cd, cdv1beta1.StatusReady, 2*time.Minute)
}

// checkHostEntries checks the domain's status lists exactly nodes, at their node addresses,
// Ready unless notReady says otherwise.
func checkHostEntries(t *testing.T, cd *cdv1beta1.ComputeDomain, nodes []string, notReady map[string]string) {
	t.Helper()
	testutil.Eventually(t, time.Minute, "the domain's entries", func() (bool, error) {
		got := getCD(t, cd)
		if len(got.Status.Nodes) != len(nodes) {
			return false, fmt.Errorf("status lists %d nodes, want %v", len(got.Status.Nodes), nodes)
		}
		for _, e := range got.Status.Nodes {
			want := cdv1beta1.StatusReady
			if s, ok := notReady[e.Name]; ok {
				want = s
			}
			var ip string
			for _, n := range simState.Nodes {
				if n.Name == e.Name {
					ip = n.InternalIP
				}
			}
			if !slices.Contains(nodes, e.Name) || e.IPAddress != ip || e.Status != want || e.CliqueID == "" {
				return false, fmt.Errorf("entry %+v, want one of %v at its address %s, %s, with its clique", e, nodes, ip, want)
			}
		}
		return true, nil
	})
}

// waitPlaneMode waits until plane id's controller and plugins run Ready in host-managed mode
// (hostManaged) or not: the controller's --imex-mode and the plugin's IMEX_MODE say so.
func waitPlaneMode(t *testing.T, id string, hostManaged bool) {
	t.Helper()
	waitPlaneSpec(t, id, fmt.Sprintf("host-managed IMEX %v", hostManaged), func(component string, spec corev1.PodSpec) error {
		got := slices.Contains(spec.Containers[0].Args, "--imex-mode=hostManaged")
		if component == "cdplane-kubelet-plugin" {
			got = slices.ContainsFunc(spec.Containers[0].Env, func(e corev1.EnvVar) bool {
				return e.Name == "IMEX_MODE" && e.Value == string(features.IMEXHostManaged)
			})
		}
		if got != hostManaged {
			return fmt.Errorf("host-managed %v", got)
		}
		return nil
	})
}
