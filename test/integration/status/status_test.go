package status

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/cli"
	"cdplane/internal/plane"
	"cdplane/internal/status"
	"cdplane/internal/testutil"
)

const (
	planeID = "status-a"
	cliqueA = "7c1e2d3f-0000-4000-8000-000000000001.1"
)

// fixture is what the test wrote: the plane's driver namespace, the domain's namespace, the
// domain, and a kubeconfig for the CLI.
type fixture struct {
	driverNS, ns string
	cd           *cdv1beta1.ComputeDomain
	kubeconfig   string
}

// TestStatus writes a plane and a domain four nodes wide: sn-1 serves it Ready; sn-2's daemon
// found a host nvidia-imex holding the node's IMEX session (its pod labelled, the NodesBlocked
// condition naming it); sn-3's daemon is not Ready and the kubelet's last probe failure says
// why; sn-4 has the domain's label and an allocated channel claim but no daemon pod. Both forms
// of the command, as text and as JSON, must say so.
func TestStatus(t *testing.T) {
	f := setUp(t)

	t.Run("planes", func(t *testing.T) {
		out := mustCLI(t, f, "status")
		row := lineWith(t, out, planeID+" ")
		// PLANE VERSION CONTROLLER NODES PLUGIN-READY NAMESPACES DOMAINS-READY DOMAINS-NOT-READY LEADER LEADER-AGE
		want := []string{planeID, "v9.9.9-test", "0/1", "4", "2", "1", "0", "1", planeID + "-cdplane-controller-7d9f-abcde", "30m"}
		if got := strings.Fields(row); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("row %q, want the fields %q", row, want)
		}

		var p status.Planes
		if err := json.Unmarshal([]byte(mustCLI(t, f, "status", "-o", "json")), &p); err != nil {
			t.Fatal(err)
		}
		var got *status.Plane
		for i := range p.Planes {
			if p.Planes[i].ID == planeID {
				got = &p.Planes[i]
			}
		}
		switch {
		case got == nil:
			t.Fatalf("plane %s not in %+v", planeID, p)
		case !got.Installed || got.DriverNamespace != f.driverNS || got.Nodes != 4 || got.NodesPluginReady != 2 ||
			got.Namespaces != 1 || got.Domains != (status.DomainCounts{NotReady: 1}):
			t.Errorf("plane %+v", *got)
		case got.Leader == nil || got.Leader.Holder != planeID+"-cdplane-controller-7d9f-abcde" || got.Leader.AgeSeconds < 1800 || got.Leader.Expired:
			t.Errorf("leader %+v", got.Leader)
		}
	})

	t.Run("domain", func(t *testing.T) {
		out := mustCLI(t, f, "status", "-n", f.ns, f.cd.Name)
		for _, want := range []string{
			"Status: NotReady  numNodes: 4  readyNodes: 1  totalNodes: 3  membership: cliques",
			cliqueA + "  1/3    sn-1[0]✓ sn-2[1]✗ sn-3[2]✗",
			"Held back (3):",
			"Ready         False   WaitingForNodes  3 of 4 nodes have joined",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q", want)
			}
		}
		for node, want := range map[string][]string{
			"sn-2": {"HostIMEXInUse", "systemctl disable --now nvidia-imex"},
			"sn-3": {"DaemonNotReady", "is not Ready", "Unhealthy: Readiness probe failed: IMEX is not ready: waiting for recovery quorum"},
			"sn-4": {"NoDaemonPod", "a channel claim of the domain is allocated on the node and it carries the domain's label"},
		} {
			line := lineWith(t, out, "  "+node+" ")
			for _, w := range want {
				if !strings.Contains(line, w) {
					t.Errorf("%s: line %q lacks %q", node, line, w)
				}
			}
		}
		if strings.Contains(out, "sn-1 ") || strings.Contains(out, "\x1b[") {
			t.Errorf("sn-1 is not held back, and output to a buffer is not coloured:\n%s", out)
		}

		var d status.Domain
		if err := json.Unmarshal([]byte(mustCLI(t, f, "status", "-n", f.ns, f.cd.Name, "-o", "json")), &d); err != nil {
			t.Fatal(err)
		}
		var held []string
		for _, h := range d.HeldBack {
			held = append(held, h.Node+"/"+h.Reason)
		}
		if got, want := strings.Join(held, " "), "sn-2/HostIMEXInUse sn-3/DaemonNotReady sn-4/NoDaemonPod"; got != want {
			t.Errorf("heldBack %s, want %s", got, want)
		}
		if d.ControlPlaneID != planeID || d.DriverNamespace != f.driverNS || d.Membership != status.MembershipCliques || len(d.Cliques) != 1 || d.Cliques[0].Total != 3 {
			t.Errorf("domain %+v", d)
		}
	})

	// kubectl's namespace habits: -n lists the namespace's domains, -A every namespace's, and a
	// NAME without -n is looked up in the kubeconfig context's namespace.
	t.Run("a namespace's domains", func(t *testing.T) {
		// NAME STATUS NODES CLIQUES AGE: one clique of three entries, ready 1 of numNodes 4.
		row := strings.Fields(lineWith(t, mustCLI(t, f, "status", "-n", f.ns), f.cd.Name+" "))
		if len(row) != 5 || strings.Join(row[:4], " ") != f.cd.Name+" NotReady 1/4 1" {
			t.Errorf("row %q, want %s NotReady 1/4 1 AGE", row, f.cd.Name)
		}
		if row := strings.Fields(lineWith(t, mustCLI(t, f, "status", "-A"), " "+f.cd.Name+" ")); len(row) != 6 || row[0] != f.ns {
			t.Errorf("-A: row %q, want the namespace %s first", row, f.ns)
		}
		if out := mustCLI(t, f, "status", "-n", f.ns, "-o", "name"); out != "computedomain.resource.nvidia.com/"+f.cd.Name+"\n" {
			t.Errorf("-o name: %q", out)
		}
		if out := mustCLI(t, f, "status", "-A", "-o", "jsonpath={.kind} {.domains[?(@.name==\""+f.cd.Name+"\")].readyNodes}"); out != "DomainStatusList 1" {
			t.Errorf("-o jsonpath: %q", out)
		}
	})

	t.Run("a domain in the context's namespace", func(t *testing.T) {
		cfg, err := clientcmd.LoadFromFile(f.kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Contexts[cfg.CurrentContext].Namespace = f.ns
		inNS := filepath.Join(t.TempDir(), "in-ns.kubeconfig")
		if err := clientcmd.WriteToFile(*cfg, inNS); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		if code := cli.Main([]string{"status", f.cd.Name, "--kubeconfig", inNS}, &stdout, &stderr); code != 0 || !strings.HasPrefix(stdout.String(), "ComputeDomain "+f.ns+"/"+f.cd.Name+" ") {
			t.Errorf("status %s with the context's namespace %s: exit %d\n%s%s", f.cd.Name, f.ns, code, stdout.String(), stderr.String())
		}
	})

	t.Run("a domain that does not exist", func(t *testing.T) {
		code, out := runCLI(f, "status", "-n", f.ns, "nope")
		if code != 1 || !strings.Contains(out, "ComputeDomain "+f.ns+"/nope not found") {
			t.Errorf("exit %d:\n%s", code, out)
		}
	})
}

func runCLI(f *fixture, args ...string) (int, string) {
	var stdout, stderr bytes.Buffer
	code := cli.Main(append(args, "--kubeconfig", f.kubeconfig), &stdout, &stderr)
	return code, stdout.String() + stderr.String()
}

func mustCLI(t *testing.T, f *fixture, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Main(append(args, "--kubeconfig", f.kubeconfig), &stdout, &stderr)
	t.Logf("cdplane %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	if code != 0 {
		t.Fatalf("cdplane %s: exit %d: %s", strings.Join(args, " "), code, stderr.String())
	}
	return stdout.String()
}

// lineWith returns the first line of out containing s.
func lineWith(t *testing.T, out, s string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	t.Fatalf("no line with %q in:\n%s", s, out)
	return ""
}

func setUp(t *testing.T) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := testCluster.Client
	kubeconfig, err := testCluster.AdminKubeconfig("status")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{driverNS: plane.Name(planeID, plane.DriverNamespaceLegacyName), kubeconfig: kubeconfig}
	create := func(objs ...client.Object) {
		t.Helper()
		for _, o := range objs {
			if err := c.Create(ctx, o); err != nil {
				t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
			}
			t.Cleanup(func() { _ = c.Delete(context.Background(), o) })
		}
	}
	updateStatus := func(o client.Object) {
		t.Helper()
		if err := c.Status().Update(ctx, o); err != nil {
			t.Fatalf("writing the status of %T %s: %v", o, o.GetName(), err)
		}
	}
	planeLabels := map[string]string{cdv1beta1.ControlPlaneLabel: planeID}

	// The plane, as its chart and `cdplane assign` leave it.
	create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.driverNS, Labels: planeLabels}})
	f.ns = testCluster.Namespace(t, planeLabels)
	create(controllerDeployment(f.driverNS))
	holder := planeID + "-cdplane-controller-7d9f-abcde"
	acquired := metav1.NewMicroTime(time.Now().Add(-30*time.Minute - 5*time.Second))
	create(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: planeID + "-cdplane-controller", Namespace: f.driverNS},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, AcquireTime: &acquired, RenewTime: ptr.To(metav1.NewMicroTime(time.Now())),
			LeaseDurationSeconds: ptr.To(int32(3600))},
	})
	nodes := []string{"sn-1", "sn-2", "sn-3", "sn-4"}
	for _, n := range nodes {
		create(testutil.MakeNode(n).Label(cdv1beta1.ControlPlaneLabel, planeID).Obj())
	}
	for i, n := range nodes[:3] {
		p := testutil.MakePod("plugin-"+n, f.driverNS).NodeName(n).
			Label("app.kubernetes.io/name", "cdplane-kubelet-plugin").Label("app.kubernetes.io/instance", f.driverNS).Obj()
		create(p)
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: map[bool]corev1.ConditionStatus{true: "True", false: "False"}[i < 2]}}
		updateStatus(p)
	}

	// The domain, and what the controller created for it.
	f.cd = testutil.MakeComputeDomain("train").Namespace(f.ns).NumNodes(4).Label(cdv1beta1.ControlPlaneLabel, planeID).Obj()
	create(f.cd)
	uid := string(f.cd.UID)
	domainLabels := map[string]string{cdv1beta1.ComputeDomainLabel: uid, cdv1beta1.ControlPlaneLabel: planeID}
	ds := testutil.MakeDaemonSet(cdv1beta1.DaemonSetName(uid), f.driverNS).Selector(cdv1beta1.ComputeDomainLabel, uid).Obj()
	ds.Labels = domainLabels
	create(ds)
	owner := testutil.ControllerRef("apps/v1", "DaemonSet", ds.Name, ds.UID)
	clique := testutil.MakeClique(cdv1beta1.CliqueName(uid, cliqueA), f.driverNS).
		Label(cdv1beta1.ComputeDomainLabel, uid).Label(cdv1beta1.CliqueIDLabel, cliqueA).Label(cdv1beta1.ControlPlaneLabel, planeID).OwnedBy(owner).
		Daemon("sn-1", "10.1.0.1", cliqueA, 0, "Ready").Daemon("sn-2", "10.1.0.2", cliqueA, 1, "NotReady").Daemon("sn-3", "10.1.0.3", cliqueA, 2, "NotReady").Obj()
	clique.ReadyDaemons, clique.TotalDaemons = 1, 3
	create(clique)

	// The nodes: labelled for the domain by the kubelet plugin, a channel claim allocated on each.
	for _, n := range nodes {
		node := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: n}, node); err != nil {
			t.Fatal(err)
		}
		node.Labels[cdv1beta1.ComputeDomainLabel] = uid
		if err := c.Update(ctx, node); err != nil {
			t.Fatal(err)
		}
		claim := channelClaim(f.cd, n)
		create(claim)
		claim.Status.Allocation = allocation(claim, n)
		updateStatus(claim)
	}

	// The daemon pods: none on sn-4.
	pods := map[string]*corev1.Pod{}
	for i, n := range nodes[:3] {
		w := testutil.MakePod("computedomain-daemon-"+n, f.driverNS).NodeName(n).OwnedBy(owner).
			Label(cdv1beta1.ComputeDomainLabel, uid).Label(cdv1beta1.CliqueIDLabel, cliqueA)
		if n == "sn-2" {
			w.Label(cdv1beta1.IMEXBlockedLabel, cdv1beta1.IMEXBlockedHostIMEXInUse)
		}
		p := w.Obj()
		create(p)
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP = fmt.Sprintf("10.1.0.%d", i+1)
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: map[bool]corev1.ConditionStatus{true: "True", false: "False"}[n == "sn-1"]}}
		updateStatus(p)
		pods[n] = p
	}
	// The kubelet's probe failures, the older one first.
	create(probeFailure(pods["sn-3"], "IMEX is not ready: starting", time.Now().Add(-time.Minute)),
		probeFailure(pods["sn-3"], "IMEX is not ready: waiting for recovery quorum", time.Now()),
		probeFailure(pods["sn-2"], "IMEX cannot run on this node: HostIMEXInUse: NV_ERR_IN_USE", time.Now()))

	// The domain's status, as the controller writes it.
	now := metav1.Now()
	f.cd.Status = cdv1beta1.ComputeDomainStatus{
		Status: cdv1beta1.StatusNotReady, ReadyNodes: 1, TotalNodes: 3,
		Nodes: []cdv1beta1.ComputeDomainNode{
			{Name: "sn-1", IPAddress: "10.1.0.1", CliqueID: cliqueA, Index: 0, Status: "Ready"},
			{Name: "sn-2", IPAddress: "10.1.0.2", CliqueID: cliqueA, Index: 1, Status: "NotReady"},
			{Name: "sn-3", IPAddress: "10.1.0.3", CliqueID: cliqueA, Index: 2, Status: "NotReady"},
		},
		Cliques: []cdv1beta1.ComputeDomainCliqueSummary{{ID: cliqueA, Ready: 1, Total: 3}},
		Conditions: []metav1.Condition{
			{Type: cdv1beta1.ConditionReady, Status: metav1.ConditionFalse, Reason: cdv1beta1.ReasonWaitingForNodes, LastTransitionTime: now,
				Message: "3 of 4 nodes have joined; waiting for the workload's pods to land on 1 more"},
			{Type: cdv1beta1.ConditionNodesBlocked, Status: metav1.ConditionTrue, Reason: cdv1beta1.ReasonHostIMEXInUse, LastTransitionTime: now,
				Message: "IMEX cannot run on 1 nodes; their daemons do not retry: sn-2 (HostIMEXInUse)"},
		},
	}
	updateStatus(f.cd)
	return f
}

// controllerDeployment is the plane's controller Deployment as the plane chart renders it (the
// labels and flags `cdplane status` reads).
func controllerDeployment(ns string) *appsv1.Deployment {
	selector := map[string]string{"app.kubernetes.io/name": "cdplane-controller", "app.kubernetes.io/instance": ns}
	labels := map[string]string{"app.kubernetes.io/part-of": "cdplane", "app.kubernetes.io/version": "9.9.9", cdv1beta1.ControlPlaneLabel: planeID}
	for k, v := range selector {
		labels[k] = v
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: planeID + "-cdplane-controller", Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "controller", Image: "registry.example:5000/cdplane:v9.9.9-test", Command: []string{"cdplane-controller"},
					Args: []string{"--max-nodes-per-imex-domain=18", "--leader-elect=true", "--leader-election-id=" + planeID + "-cdplane-controller", "--control-plane-id=" + planeID},
				}}},
			},
		},
	}
}

// channelClaim is a claim made from the domain's workload template.
func channelClaim(cd *cdv1beta1.ComputeDomain, node string) *resourcev1.ResourceClaim {
	raw, _ := json.Marshal(cdv1beta1.NewChannelConfig(string(cd.UID), cdv1beta1.AllocationModeSingle))
	return &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "channel-" + node, Namespace: cd.Namespace, Labels: map[string]string{cdv1beta1.ComputeDomainLabel: string(cd.UID)}},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "channel", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: cdv1beta1.ChannelDeviceClass}}},
			Config: []resourcev1.DeviceClaimConfiguration{{Requests: []string{"channel"}, DeviceConfiguration: resourcev1.DeviceConfiguration{
				Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: cdv1beta1.DriverName, Parameters: runtime.RawExtension{Raw: raw}},
			}}},
		}},
	}
}

// allocation is what the scheduler writes for a claim placed on node.
func allocation(claim *resourcev1.ResourceClaim, node string) *resourcev1.AllocationResult {
	return &resourcev1.AllocationResult{
		Devices: resourcev1.DeviceAllocationResult{
			Results: []resourcev1.DeviceRequestAllocationResult{{Request: "channel", Driver: cdv1beta1.DriverName, Pool: node, Device: "channel-0"}},
			Config: []resourcev1.DeviceAllocationConfiguration{{
				Source: resourcev1.AllocationConfigSourceClaim, Requests: []string{"channel"},
				DeviceConfiguration: claim.Spec.Devices.Config[0].DeviceConfiguration,
			}},
		},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
		}}}}},
	}
}

// probeFailure is the event the kubelet posts when a pod's readiness probe fails.
func probeFailure(pod *corev1.Pod, message string, at time.Time) *corev1.Event {
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", pod.Name, at.UnixNano()), Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			FieldPath: "spec.containers{main}"},
		Reason: "Unhealthy", Message: "Readiness probe failed: " + message, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "kubelet", Host: pod.Spec.NodeName},
		FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at), Count: 1,
	}
}
