package e2e

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubectl/pkg/util/podutils"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/lifecycle"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
)

// Channel injection: a Single-mode domain gives each pod channel 0; an All-mode domain gives
// every channel device there is (2048), as the original does, whatever the node publishes. What
// the container sees is in its log (kubectl logs); the claim's CDI spec is where the plugin
// writes it (its --cdi-root on the node) while the pod runs, and gone once it is deleted.
func TestChannelInjection(t *testing.T) {
	e2eOnly(t)
	for name, tc := range map[string]struct {
		mode string
		want int
	}{"single": {cdv1beta1.AllocationModeSingle, 1}, "all": {cdv1beta1.AllocationModeAll, kubeletplugin.MaxChannels}} {
		t.Run(name, func(t *testing.T) {
			waitPlanesIdle(t, planeA)
			ns := namespace(t, planeA)
			cd := computeDomain(t, ns, "cd", 1, tc.mode)
			j := job(t, ns, "worker", "cd", 1, 0)
			pods := waitRunning(t, ns, "worker", 1, 2*time.Minute)
			waitStatus(t, cd, cdv1beta1.StatusReady, time.Minute)
			got := channelDevices(logs(t, &pods[0]))
			if len(got) != tc.want || got[0] != "/dev/nvidia-caps-imex-channels/channel0" {
				t.Fatalf("the container got %d channels (first %v), want %d starting with channel0", len(got), got[:min(len(got), 3)], tc.want)
			}
			spec := cdiSpecPath(t, pods[0].Spec.NodeName, podClaimUID(t, &pods[0]))
			data, err := os.ReadFile(spec)
			if err != nil {
				t.Fatalf("the running pod's claim has no CDI spec where the plugin writes it: %v", err)
			}
			if !strings.Contains(string(data), "nvidia-caps-imex-channels/channel0") {
				t.Errorf("CDI spec %s does not inject channel0:\n%s", spec, data)
			}
			deleteAndWait(t, j, client.PropagationPolicy(metav1.DeletePropagationForeground))
			waitCDISpecGone(t, spec)
		})
	}
}

// podClaimUID returns the UID of the pod's (only) resource claim.
func podClaimUID(t *testing.T, p *corev1.Pod) types.UID {
	t.Helper()
	cur := &corev1.Pod{}
	must(t, c.Get(ctx(), client.ObjectKeyFromObject(p), cur))
	if len(cur.Status.ResourceClaimStatuses) != 1 || cur.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s/%s has claims %+v, want one", p.Namespace, p.Name, cur.Status.ResourceClaimStatuses)
	}
	claim := &resourcev1.ResourceClaim{}
	must(t, c.Get(ctx(), client.ObjectKey{Namespace: p.Namespace, Name: *cur.Status.ResourceClaimStatuses[0].ResourceClaimName}, claim))
	return claim.UID
}

// waitCDISpecGone waits until the spec file is gone: unprepare removes it.
func waitCDISpecGone(t *testing.T, spec string) {
	t.Helper()
	testutil.Eventually(t, 2*time.Minute, "CDI spec "+spec+" removed", func() (bool, error) {
		_, err := os.Stat(spec)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return true, nil
		case err == nil:
			return false, errors.New("still there")
		default:
			return false, fmt.Errorf("still there: %w", err)
		}
	})
}

// Status follows the workload: Ready once its pods run on numNodes nodes (of one rack, so one
// clique), with the two IMEX daemons connected to each other both ways and each serving its
// metrics (registered and Ready at its index, labelled with its plane); NotReady after the
// workload is deleted; the daemons shut down, their node labels go and so do the workload
// claims' CDI specs. With cliques (plane A, the default) membership is in ComputeDomainClique
// objects; without (plane B with the gate off for the subtest) it is in status.nodes alone and
// no clique object is written.
func TestStatusFollowsWorkloadAndDaemonsShutDown(t *testing.T) {
	e2eOnly(t)
	for name, tc := range map[string]struct {
		id      string
		cliques bool
	}{"with cliques": {planeA, true}, "without cliques": {planeB, false}} {
		t.Run(name, func(t *testing.T) {
			waitPlanesIdle(t, tc.id)
			if !tc.cliques {
				setCliquesGate(t, tc.id, false)
			}
			ns := namespace(t, tc.id)
			cd := computeDomain(t, ns, "cd", 2, "")
			// One rack: the two nodes share a clique, so their IMEX must connect to each other.
			j := job(t, ns, "worker", "cd", 2, 0, planeRacks(t, tc.id)[0])
			pods := waitRunning(t, ns, "worker", 2, 2*time.Minute)
			waitStatus(t, cd, cdv1beta1.StatusReady, time.Minute)
			if got := getCD(t, cd); got.Status.ReadyNodes != 2 || len(got.Status.Nodes) != 2 {
				t.Errorf("Ready domain: readyNodes %d, %d nodes listed; want 2 and 2", got.Status.ReadyNodes, len(got.Status.Nodes))
			}
			if n := cliques(t, tc.id, cd); (n > 0) != tc.cliques {
				t.Errorf("%d clique objects for the domain; cliques enabled: %v", n, tc.cliques)
			}
			checkIMEXConnected(t, tc.id, cd)
			checkDaemonMetrics(t, tc.id, cd)
			var specs []string
			for i := range pods {
				specs = append(specs, cdiSpecPath(t, pods[i].Spec.NodeName, podClaimUID(t, &pods[i])))
			}

			deleteAndWait(t, j, client.PropagationPolicy(metav1.DeletePropagationForeground))
			waitStatus(t, cd, cdv1beta1.StatusNotReady, time.Minute)
			testutil.Eventually(t, 2*time.Minute, "daemon pods gone and node labels removed", func() (bool, error) {
				nodes := &corev1.NodeList{}
				if err := c.List(ctx(), nodes, client.MatchingLabels{cdv1beta1.ComputeDomainLabel: string(cd.UID)}); err != nil {
					return false, err
				}
				return len(daemonPods(t, tc.id, cd)) == 0 && len(nodes.Items) == 0, nil
			})
			// Read as NVIDIA's test suite reads it: a domain whose daemons have all left has no
			// nodes key in its status at all.
			testutil.Eventually(t, time.Minute, "no nodes key in the status", func() (bool, error) {
				u := &unstructured.Unstructured{}
				u.SetGroupVersionKind(cdv1beta1.GroupVersion.WithKind("ComputeDomain"))
				if err := c.Get(ctx(), client.ObjectKeyFromObject(cd), u); err != nil {
					return false, err
				}
				_, found, err := unstructured.NestedFieldNoCopy(u.Object, "status", "nodes")
				return !found, err
			})
			for _, spec := range specs {
				waitCDISpecGone(t, spec)
			}
		})
	}
}

// setCliquesGate sets the ComputeDomainCliques gate of plane id for the test (`cdplane apply
// plane` with the sim's values), waits until the plane's controller and plugins run with it,
// and restores the default afterwards (and waits for that too).
func setCliquesGate(t *testing.T, id string, on bool) {
	t.Helper()
	m, err := lifecycle.New(lifecycle.Options{Getter: lifecycle.KubeconfigGetter(simState.ControlPlane.Kubeconfig, ""), Timeout: 3 * time.Minute, Wait: true})
	must(t, err)
	t.Cleanup(func() {
		if err := m.ApplyPlane(ctx(), id, simState.PlaneValues(), lifecycle.ResetValues); err != nil {
			t.Errorf("restoring plane %s: %v", id, err)
		}
		waitPlaneGate(t, id, "")
	})
	vals := simState.PlaneValues()
	vals["featureGates"] = map[string]any{"ComputeDomainCliques": on}
	must(t, m.ApplyPlane(ctx(), id, vals, lifecycle.ResetValues))
	waitPlaneGate(t, id, fmt.Sprint(on))
}

// waitPlaneGate waits until plane id's controller Deployment and kubelet plugin DaemonSet
// carry ComputeDomainCliques=want in their --feature-gates ("" for not set: the default), and
// the only controller pod and every plugin pod running, Ready, were started with it.
func waitPlaneGate(t *testing.T, id, want string) {
	t.Helper()
	waitPlaneSpec(t, id, fmt.Sprintf("ComputeDomainCliques=%q", want), func(_ string, spec corev1.PodSpec) error {
		if got := cliquesGateArg(spec.Containers[0].Args); got != want {
			return fmt.Errorf("ComputeDomainCliques=%q", got)
		}
		return nil
	})
}

// waitPlaneSpec waits until plane id's controller Deployment and kubelet-plugin DaemonSet have
// pod templates that check accepts (component is cdplane-controller or cdplane-kubelet-plugin),
// and the one controller pod and a plugin pod on every node of the plane run Ready from such a
// spec. what says what is waited for.
func waitPlaneSpec(t *testing.T, id, what string, check func(component string, spec corev1.PodSpec) error) {
	t.Helper()
	driverNS := plane.Name(id, plane.DriverNamespaceLegacyName)
	testutil.Eventually(t, 3*time.Minute, fmt.Sprintf("plane %s running with %s", id, what), func() (bool, error) {
		dep := &appsv1.Deployment{}
		if err := c.Get(ctx(), client.ObjectKey{Namespace: driverNS, Name: plane.Name(id, "cdplane-controller")}, dep); err != nil {
			return false, err
		}
		if err := check("cdplane-controller", dep.Spec.Template.Spec); err != nil {
			return false, fmt.Errorf("controller Deployment: %w", err)
		}
		ds := &appsv1.DaemonSet{}
		if err := c.Get(ctx(), client.ObjectKey{Namespace: driverNS, Name: plane.Name(id, "cdplane-kubelet-plugin")}, ds); err != nil {
			return false, err
		}
		if err := check("cdplane-kubelet-plugin", ds.Spec.Template.Spec); err != nil {
			return false, fmt.Errorf("kubelet plugin DaemonSet: %w", err)
		}
		pods := &corev1.PodList{}
		if err := c.List(ctx(), pods, client.InNamespace(driverNS)); err != nil {
			return false, err
		}
		controllers, plugins := 0, 0
		for _, p := range pods.Items {
			name := p.Labels["app.kubernetes.io/name"]
			if name != "cdplane-controller" && name != "cdplane-kubelet-plugin" {
				continue
			}
			if p.DeletionTimestamp != nil || !podutils.IsPodReady(&p) {
				return false, fmt.Errorf("pod %s not Ready", p.Name)
			}
			if err := check(name, p.Spec); err != nil {
				return false, fmt.Errorf("pod %s: %w", p.Name, err)
			}
			if name == "cdplane-controller" {
				controllers++
			} else {
				plugins++
			}
		}
		if want := ptr.Deref(dep.Spec.Replicas, 1); int32(controllers) != want || plugins != len(planeNodes(id, -1)) {
			return false, fmt.Errorf("%d controller (want %d) and %d plugin pods Ready", controllers, want, plugins)
		}
		return true, nil
	})
}

// cliquesGateArg returns the value of ComputeDomainCliques in --feature-gates, "" when unset.
func cliquesGateArg(args []string) string {
	for _, a := range args {
		gates, ok := strings.CutPrefix(a, "--feature-gates=")
		if !ok {
			continue
		}
		for _, g := range strings.Split(gates, ",") {
			if v, ok := strings.CutPrefix(g, "ComputeDomainCliques="); ok {
				return v
			}
		}
	}
	return ""
}

// A bad opaque config is refused when it is applied, naming the field.
func TestUnknownOpaqueFieldRefused(t *testing.T) {
	e2eOnly(t)
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

// Two planes side by side: each plane's domain is served by its own daemons, in its own driver
// namespace, on its own nodes.
func TestTwoPlanesSideBySide(t *testing.T) {
	e2eOnly(t)
	waitPlanesIdle(t, planeA, planeB)
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
