package controller

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/featuregate"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller"
	"cdplane/internal/controller/computedomain"
	"cdplane/internal/features"
	"cdplane/internal/testutil"
)

// TestHostManagedMembership runs the controller with host-managed IMEX: a domain gets its
// channel template (one channel per claim, whatever the domain asks) but no daemon DaemonSet or
// daemon template, and its members — nodes labelled for it with an allocated channel claim —
// get their entries from the plane's kubelet-plugin pods: host IP, the node's clique label, and
// readiness (the plugin's host-IMEX probe). A plugin-labelled pod not controlled by the plugin
// DaemonSet counts for nothing.
func TestHostManagedMembership(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true, func(o *controller.Options) {
		o.Gates = features.NewGatesForTest(t, map[featuregate.Feature]bool{features.HostManagedIMEXDaemon: true})
		o.IMEXMode = features.IMEXHostManaged
	})
	cd := testutil.MakeComputeDomain("host").Namespace(e.ns).NumNodes(2).AllocationMode(cdv1beta1.AllocationModeAll).
		Label("cdplane.test/env", e.selector).Obj()
	if err := e.c.Create(e.ctx(), cd); err != nil {
		t.Fatal(err)
	}

	// The plugin DaemonSet, selecting no node (the test plays its pods).
	plugin := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: computedomain.PluginComponent, Namespace: e.driverNS},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: computedomain.PluginPodLabels()},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: computedomain.PluginPodLabels()},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"cdplane.test/no-such-node": "true"},
					Containers:   []corev1.Container{{Name: "plugin", Image: "cdplane:test"}},
				},
			},
		},
	}
	if err := e.c.Create(e.ctx(), plugin); err != nil {
		t.Fatal(err)
	}
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: plugin.Name, UID: plugin.UID, Controller: ptr.To(true)}

	nodes := map[string]string{}
	for _, n := range []string{"a", "b", "c"} {
		nodes[n] = e.addNode(cd, n)
		setNodeLabel(t, e, nodes[n], computedomain.NodeCliqueLabel, testClique)
	}
	pods := map[string]*corev1.Pod{}
	hostIPs := map[string]string{"a": "127.1.200.1", "b": "127.1.200.2", "c": "127.1.200.3"}
	for n, owned := range map[string]bool{"a": true, "b": true, "c": false} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "plugin-", Namespace: e.driverNS, Labels: computedomain.PluginPodLabels()},
			Spec:       corev1.PodSpec{NodeName: nodes[n], Containers: []corev1.Container{{Name: "plugin", Image: "cdplane:test"}}},
		}
		if owned {
			pod.OwnerReferences = []metav1.OwnerReference{owner}
		}
		if err := e.c.Create(e.ctx(), pod); err != nil {
			t.Fatal(err)
		}
		pod.Status.HostIP, pod.Status.Phase = hostIPs[n], corev1.PodRunning
		pods[n] = pod
		setPodReady(t, e, pod, n != "b")
	}

	got := e.waitStatus(cd, cdv1beta1.StatusNotReady, time.Minute)
	e.eventually(time.Minute, "entries for a (Ready) and b (NotReady), none for c", func() (bool, error) {
		got = e.getCD(cd)
		a, okA := entryOf(got, nodes["a"])
		b, okB := entryOf(got, nodes["b"])
		_, okC := entryOf(got, nodes["c"])
		return okA && okB && !okC && a.Status == cdv1beta1.StatusReady && b.Status == cdv1beta1.StatusNotReady, nil
	})
	a, _ := entryOf(got, nodes["a"])
	if a.IPAddress != hostIPs["a"] || a.CliqueID != testClique || a.Index < 0 {
		t.Errorf("entry of a %+v: want the plugin pod's host IP %s, clique %s and an index", a, hostIPs["a"], testClique)
	}

	// Nothing of a daemon exists; the channel template gives one channel.
	for _, obj := range []client.Object{&appsv1.DaemonSet{}, &resourcev1.ResourceClaimTemplate{}} {
		err := e.c.Get(e.ctx(), client.ObjectKey{Namespace: e.driverNS, Name: cdv1beta1.DaemonSetName(string(cd.UID))}, obj)
		if !apierrors.IsNotFound(err) {
			t.Errorf("%T of the domain's daemon: %v, want none", obj, err)
		}
	}
	// Membership lives in status.nodes: no DaemonSet owns clique objects.
	cliques := &cdv1beta1.ComputeDomainCliqueList{}
	if err := e.c.List(e.ctx(), cliques, client.InNamespace(e.driverNS)); err != nil {
		t.Fatal(err)
	}
	if len(cliques.Items) != 0 {
		t.Errorf("%d clique objects in host-managed mode, want none", len(cliques.Items))
	}
	tmpl := &resourcev1.ResourceClaimTemplate{}
	if err := e.c.Get(e.ctx(), client.ObjectKey{Namespace: e.ns, Name: cd.Spec.Channel.ResourceClaimTemplate.Name}, tmpl); err != nil {
		t.Fatal(err)
	}
	var params cdv1beta1.ComputeDomainChannelConfig
	if err := json.Unmarshal(tmpl.Spec.Spec.Devices.Config[0].Opaque.Parameters.Raw, &params); err != nil {
		t.Fatal(err)
	}
	if params.AllocationMode != cdv1beta1.AllocationModeSingle {
		t.Errorf("channel template allocation mode %q, want Single in host-managed mode", params.AllocationMode)
	}

	// b's host IMEX turns ready: the domain is Ready. a's fails its probe: NotReady again.
	setPodReady(t, e, pods["b"], true)
	e.waitStatus(cd, cdv1beta1.StatusReady, time.Minute)
	setPodReady(t, e, pods["a"], false)
	got = e.waitStatus(cd, cdv1beta1.StatusNotReady, time.Minute)
	if a, _ := entryOf(got, nodes["a"]); a.Status != cdv1beta1.StatusNotReady {
		t.Errorf("entry of a %+v after its plugin's probe failed, want NotReady", a)
	}

	// Deleting the domain finalizes it without daemon objects to remove.
	if err := e.c.Delete(e.ctx(), cd); err != nil {
		t.Fatal(err)
	}
	e.eventually(time.Minute, "the domain to be finalized", func() (bool, error) {
		err := e.c.Get(e.ctx(), client.ObjectKeyFromObject(cd), &cdv1beta1.ComputeDomain{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

func setPodReady(t *testing.T, e *env, pod *corev1.Pod, ready bool) {
	t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	if err := e.c.Status().Update(e.ctx(), pod); err != nil {
		t.Fatal(err)
	}
}

func setNodeLabel(t *testing.T, e *env, node, key, value string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{key: value}}})
	if err := e.c.Patch(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
}
