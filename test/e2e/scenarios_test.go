package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/lifecycle"
	"cdplane/internal/plane"
	"cdplane/internal/sim"
)

// Channel injection: a Single-mode domain gives each pod channel 0; an All-mode domain gives
// every channel device there is (2048), as the original does, whatever the node publishes. What the container sees is in its log (kubectl logs).
func TestChannelInjection(t *testing.T) {
	for name, tc := range map[string]struct {
		mode string
		want int
	}{"single": {cdv1beta1.AllocationModeSingle, 1}, "all": {cdv1beta1.AllocationModeAll, kubeletplugin.MaxChannels}} {
		t.Run(name, func(t *testing.T) {
			ns := namespace(t, planeA)
			cd := computeDomain(t, ns, "cd", 1, tc.mode)
			job(t, ns, "worker", "cd", 1, 0)
			pods := waitRunning(t, ns, "worker", 1, 2*time.Minute)
			waitStatus(t, cd, cdv1beta1.StatusReady, time.Minute)
			got := channelDevices(logs(t, &pods[0]))
			if len(got) != tc.want || got[0] != "/dev/nvidia-caps-imex-channels/channel0" {
				t.Fatalf("the container got %d channels (first %v), want %d starting with channel0", len(got), got[:min(len(got), 3)], tc.want)
			}
		})
	}
}

// Status follows the workload: Ready once its pods run on numNodes nodes, NotReady after the
// workload is deleted; the daemons shut down and their node labels go. With cliques (plane A,
// the default) membership is in ComputeDomainClique objects; without (plane B with the gate
// off for the subtest) it is in status.nodes alone and no clique object is written.
func TestStatusFollowsWorkloadAndDaemonsShutDown(t *testing.T) {
	for name, tc := range map[string]struct {
		id      string
		cliques bool
	}{"with cliques": {planeA, true}, "without cliques": {planeB, false}} {
		t.Run(name, func(t *testing.T) {
			if !tc.cliques {
				setCliquesGate(t, tc.id, false)
			}
			ns := namespace(t, tc.id)
			cd := computeDomain(t, ns, "cd", 2, "")
			j := job(t, ns, "worker", "cd", 2, 0)
			waitRunning(t, ns, "worker", 2, 2*time.Minute)
			waitStatus(t, cd, cdv1beta1.StatusReady, time.Minute)
			if got := getCD(t, cd); got.Status.ReadyNodes != 2 || len(got.Status.Nodes) != 2 {
				t.Errorf("Ready domain: readyNodes %d, %d nodes listed; want 2 and 2", got.Status.ReadyNodes, len(got.Status.Nodes))
			}
			if n := cliques(t, tc.id, cd); (n > 0) != tc.cliques {
				t.Errorf("%d clique objects for the domain; cliques enabled: %v", n, tc.cliques)
			}
			checkIMEXPeers(t, tc.id, cd)

			deleteAndWait(t, j, client.PropagationPolicy(metav1.DeletePropagationForeground))
			waitStatus(t, cd, cdv1beta1.StatusNotReady, time.Minute)
			eventually(t, 2*time.Minute, "daemon pods gone and node labels removed", func() (bool, error) {
				nodes := &corev1.NodeList{}
				if err := c.List(ctx(), nodes, client.MatchingLabels{cdv1beta1.ComputeDomainLabel: string(cd.UID)}); err != nil {
					return false, err
				}
				return len(daemonPods(t, tc.id, cd)) == 0 && len(nodes.Items) == 0, nil
			})
		})
	}
}

// setCliquesGate sets the ComputeDomainCliques gate of plane id for the test (`cdplane apply
// plane` with the sim's values), restoring the default afterwards.
func setCliquesGate(t *testing.T, id string, on bool) {
	t.Helper()
	m, err := lifecycle.New(lifecycle.Options{Kubeconfig: simState.ControlPlane.Kubeconfig, Timeout: 3 * time.Minute, Wait: true})
	must(t, err)
	vals := simState.PlaneValues()
	vals["featureGates"] = map[string]any{"ComputeDomainCliques": on}
	must(t, m.ApplyPlane(ctx(), id, vals))
	t.Cleanup(func() {
		if err := m.ApplyPlane(ctx(), id, simState.PlaneValues()); err != nil {
			t.Errorf("restoring plane %s: %v", id, err)
		}
	})
}

// A bad opaque config is refused when it is applied, naming the field.
func TestUnknownOpaqueFieldRefused(t *testing.T) {
	ns := namespace(t, planeA)
	rct := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: ns},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "channel", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "compute-domain-default-channel.nvidia.com"}}},
			Config: []resourcev1.DeviceClaimConfiguration{{DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
				Driver:     cdv1beta1.DriverName,
				Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"x","allocationMod":"All"}`)},
			}}}},
		}}},
	}
	err := c.Create(ctx(), rct)
	if err == nil || !strings.Contains(err.Error(), "allocationMod") {
		t.Fatalf("creating a claim template with an unknown opaque field: %v, want a refusal naming allocationMod", err)
	}
}

// Failover while a 2-rack job runs: force-deleting a worker (the Job replaces it), force-deleting
// every daemon pod (the DaemonSet replaces them) and deleting a worker (the job goes on with
// three). Each time the simulated IMEX peers match the cliques afterwards and the job
// completes; after a force deletion the domain is Ready again with four nodes.
func TestFailoverDuringTwoRackJob(t *testing.T) {
	for name, tc := range map[string]struct {
		disrupt    func(t *testing.T, ns string, cd *cdv1beta1.ComputeDomain)
		replaced   bool
		wantJoined int
	}{
		"force-delete one worker": {disrupt: func(t *testing.T, ns string, _ *cdv1beta1.ComputeDomain) {
			p := jobPods(t, ns, "worker")[0]
			must(t, c.Delete(ctx(), &p, client.GracePeriodSeconds(0)))
		}, replaced: true, wantJoined: 4},
		"force-delete all daemon pods": {disrupt: func(t *testing.T, _ string, cd *cdv1beta1.ComputeDomain) {
			for _, p := range daemonPods(t, planeA, cd) {
				must(t, c.Delete(ctx(), &p, client.GracePeriodSeconds(0)))
			}
		}, wantJoined: 4},
		"delete one worker": {disrupt: func(t *testing.T, ns string, _ *cdv1beta1.ComputeDomain) {
			p := jobPods(t, ns, "worker")[0]
			must(t, c.Delete(ctx(), &p))
		}, wantJoined: 3},
	} {
		t.Run(name, func(t *testing.T) {
			ns := namespace(t, planeA)
			racks := planeRacks(t, planeA)
			cd := computeDomain(t, ns, "cd", 4, "")
			job(t, ns, "worker", "cd", 4, 60*time.Second, racks...)
			waitRunning(t, ns, "worker", 4, 3*time.Minute)
			waitStatus(t, cd, cdv1beta1.StatusReady, time.Minute)
			if cl := cliques(t, planeA, cd); cl != 2 {
				t.Fatalf("the job spans %d cliques, want 2 racks", cl)
			}
			checkIMEXPeers(t, planeA, cd)
			tc.disrupt(t, ns, cd)
			if tc.replaced {
				waitRunning(t, ns, "worker", 4, 2*time.Minute)
			}
			eventually(t, 2*time.Minute, fmt.Sprintf("%d nodes Ready in the domain", tc.wantJoined), func() (bool, error) {
				got := getCD(t, cd)
				return int(got.Status.ReadyNodes) == tc.wantJoined && len(daemonPods(t, planeA, cd)) == tc.wantJoined, nil
			})
			if tc.wantJoined == 4 {
				waitStatus(t, cd, cdv1beta1.StatusReady, time.Minute)
			}
			checkIMEXPeers(t, planeA, cd)
			waitComplete(t, ns, "worker", 4*time.Minute)
		})
	}
}

// Restarting a plane's controller leaves a live domain Ready, and the new controller serves a
// new domain.
func TestControllerRestartWithLiveDomain(t *testing.T) {
	ns := namespace(t, planeB)
	cd := computeDomain(t, ns, "cd", 1, "")
	job(t, ns, "worker", "cd", 1, 0)
	waitRunning(t, ns, "worker", 1, 2*time.Minute)
	waitStatus(t, cd, cdv1beta1.StatusReady, time.Minute)
	pods := &corev1.PodList{}
	must(t, c.List(ctx(), pods, client.InNamespace(plane.Name(planeB, plane.DriverNamespaceLegacyName)),
		client.MatchingLabels{"app.kubernetes.io/name": "cdplane-controller"}))
	if len(pods.Items) != 1 {
		t.Fatalf("%d controller pods, want 1", len(pods.Items))
	}
	old := pods.Items[0]
	deleteAndWait(t, &old)
	eventually(t, 2*time.Minute, "a new controller pod Ready", func() (bool, error) {
		pods := &corev1.PodList{}
		if err := c.List(ctx(), pods, client.InNamespace(old.Namespace), client.MatchingLabels{"app.kubernetes.io/name": "cdplane-controller"}); err != nil {
			return false, err
		}
		return len(pods.Items) == 1 && pods.Items[0].UID != old.UID && podReady(&pods.Items[0]), nil
	})
	if got := getCD(t, cd); got.Status.Status != cdv1beta1.StatusReady {
		t.Errorf("after the controller restart the domain is %q", got.Status.Status)
	}
	cd2 := computeDomain(t, ns, "cd2", 1, "")
	job(t, ns, "worker2", "cd2", 1, 0)
	waitStatus(t, cd2, cdv1beta1.StatusReady, 2*time.Minute)
}

// Two planes side by side: each plane's domain is served by its own daemons, in its own driver
// namespace, on its own nodes.
func TestTwoPlanesSideBySide(t *testing.T) {
	type run struct {
		id, ns string
		cd     *cdv1beta1.ComputeDomain
	}
	var runs []run
	for _, id := range []string{planeA, planeB} {
		ns := namespace(t, id)
		cd := computeDomain(t, ns, "cd", 2, "")
		job(t, ns, "worker", "cd", 2, 0)
		runs = append(runs, run{id, ns, cd})
	}
	for _, r := range runs {
		waitRunning(t, r.ns, "worker", 2, 2*time.Minute)
		waitStatus(t, r.cd, cdv1beta1.StatusReady, time.Minute)
		if got := getCD(t, r.cd).Labels[cdv1beta1.ControlPlaneLabel]; got != r.id {
			t.Errorf("domain of plane %s carries plane label %q", r.id, got)
		}
		for _, p := range append(jobPods(t, r.ns, "worker"), daemonPods(t, r.id, r.cd)...) {
			n := &corev1.Node{}
			must(t, c.Get(ctx(), client.ObjectKey{Name: p.Spec.NodeName}, n))
			if got := n.Labels[cdv1beta1.ControlPlaneLabel]; got != r.id {
				t.Errorf("pod %s/%s of plane %s runs on node %s of plane %q", p.Namespace, p.Name, r.id, n.Name, got)
			}
		}
		if len(daemonPods(t, r.id, r.cd)) != 2 {
			t.Errorf("plane %s: %d daemon pods in its driver namespace, want 2", r.id, len(daemonPods(t, r.id, r.cd)))
		}
	}
}

// planeRacks returns the racks whose nodes belong to plane id.
func planeRacks(t *testing.T, id string) []string {
	t.Helper()
	seen := map[int]bool{}
	var out []string
	for _, n := range simState.Nodes {
		if n.Plane == id && !seen[n.Rack] {
			seen[n.Rack] = true
			out = append(out, fmt.Sprint(n.Rack))
		}
	}
	if len(out) < 2 {
		t.Fatalf("plane %s has %d racks, want 2", id, len(out))
	}
	return out[:2]
}

func cliques(t *testing.T, id string, cd *cdv1beta1.ComputeDomain) int {
	t.Helper()
	list := &cdv1beta1.ComputeDomainCliqueList{}
	must(t, c.List(ctx(), list, client.InNamespace(plane.Name(id, plane.DriverNamespaceLegacyName)),
		client.MatchingLabels{cdv1beta1.ComputeDomainLabel: string(cd.UID)}))
	return len(list.Items)
}

var _ = batchv1.Job{}

// Flipping the ComputeDomainCliques gate with live domains (`cdplane apply plane` with the
// sim's values and the gate): the live domain stays Ready with the same daemon pods, and a
// domain created after each flip becomes Ready.
func TestGateFlipWithLiveDomains(t *testing.T) {
	ns := namespace(t, planeB)
	cd := computeDomain(t, ns, "cd", 2, "")
	job(t, ns, "worker", "cd", 2, 0)
	waitRunning(t, ns, "worker", 2, 2*time.Minute)
	waitStatus(t, cd, cdv1beta1.StatusReady, time.Minute)
	daemons := map[string]bool{}
	for _, p := range daemonPods(t, planeB, cd) {
		daemons[string(p.UID)] = true
	}
	m, err := lifecycle.New(lifecycle.Options{Kubeconfig: simState.ControlPlane.Kubeconfig, Timeout: 3 * time.Minute, Wait: true})
	must(t, err)
	for i, on := range []bool{false, true} {
		vals := simState.PlaneValues()
		vals["featureGates"] = map[string]any{"ComputeDomainCliques": on}
		must(t, m.ApplyPlane(ctx(), planeB, vals))
		waitStatus(t, cd, cdv1beta1.StatusReady, time.Minute)
		for _, p := range daemonPods(t, planeB, cd) {
			if !daemons[string(p.UID)] {
				t.Errorf("gate %v: daemon pod %s was replaced", on, p.Name)
			}
		}
		name := fmt.Sprintf("after-%d", i)
		fresh := computeDomain(t, ns, name, 1, "")
		job(t, ns, name, name, 1, 0)
		waitStatus(t, fresh, cdv1beta1.StatusReady, 2*time.Minute)
	}
}

// Restarting kube-apiserver with live domains: every component reconnects, the live domain is
// Ready throughout the ten seconds after the apiserver answers again, and a new domain becomes
// Ready. (Last in the file: a failed restart would break the scenarios after it.)
func TestAPIServerRestartWithLiveDomains(t *testing.T) {
	ns := namespace(t, planeA)
	cd := computeDomain(t, ns, "cd", 2, "")
	job(t, ns, "worker", "cd", 2, 0)
	waitRunning(t, ns, "worker", 2, 2*time.Minute)
	waitStatus(t, cd, cdv1beta1.StatusReady, time.Minute)
	must(t, sim.RestartComponent(ctx(), simState, stateDir, "kube-apiserver", 2*time.Minute))
	// Consistently Ready: sampled every second for ten seconds.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); <-tick.C {
		cur := &cdv1beta1.ComputeDomain{}
		if err := c.Get(ctx(), client.ObjectKeyFromObject(cd), cur); err != nil {
			continue // a client reconnecting
		}
		if cur.Status.Status != cdv1beta1.StatusReady {
			t.Fatalf("after the apiserver restart the live domain is %q", cur.Status.Status)
		}
	}
	fresh := computeDomain(t, ns, "after", 1, "")
	job(t, ns, "after", "after", 1, 0)
	waitStatus(t, fresh, cdv1beta1.StatusReady, 2*time.Minute)
}
