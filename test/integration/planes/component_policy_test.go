package planes

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	cdv1beta1 "cdplane/api/v1beta1"
	charts "cdplane/deployments/helm"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
)

// A leaked controller or kubelet-plugin token may change only the domain label (the plugin: and
// the clique label) of its own plane's nodes — the plugin only of its own node — never taints,
// cordon, other labels, or another plane's nodes. Values are held too: the plugin sets the
// domain label only to a UID and the clique label only to a clique id; the controller only
// removes the domain label.
func TestComponentTokensChangeOnlyTheirNodesLabels(t *testing.T) {
	ctx := testContext(t)
	const id, other = "npol", "npol-other"
	ns := installPlaneRights(t, id, "rbac-controller.yaml", "rbac-kubelet-plugin.yaml", "policy-nodes.yaml")
	const uid, otherUID = "0b3c8f5e-6d1a-4f0e-9a57-2d8c4e1f7a90", "7e21d9c4-3b5f-4a86-b0d2-9c1e6f84a513"
	mkNode := func(name, planeID string) *corev1.Node {
		n := testutil.MakeNode(name).Label(cdv1beta1.ControlPlaneLabel, planeID).Label(cdv1beta1.ComputeDomainLabel, uid).Obj()
		if err := testCluster.Client.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = testCluster.Client.Delete(ctx, n) })
		return n
	}
	own, sibling, foreign := mkNode("npol-own", id), mkNode("npol-sibling", id), mkNode("npol-foreign", other)
	pluginSA := plane.Name(id, "cdplane-kubelet-plugin")
	pluginPod := testutil.MakePod("plugin-own", ns).ServiceAccount(pluginSA).NodeName(own.Name).Obj()
	if err := testCluster.Client.Create(ctx, pluginPod); err != nil {
		t.Fatal(err)
	}
	plugin := podBoundClient(t, ns, pluginSA, pluginPod).CoreV1().Nodes()
	controller := podBoundClient(t, ns, plane.Name(id, "cdplane-controller"), nil).CoreV1().Nodes()

	label := func(key, value string) []byte {
		return []byte(`{"metadata":{"labels":{"` + key + `":"` + value + `"}}}`)
	}
	unlabel := func(key string) []byte {
		return []byte(`{"metadata":{"labels":{"` + key + `":null}}}`)
	}
	taint := []byte(`{"spec":{"taints":[{"key":"evil","effect":"NoSchedule"}]}}`)
	cordon := []byte(`{"spec":{"unschedulable":true}}`)
	eventuallyRefused(t, "cordoning a node with the controller's token", func() error {
		_, err := controller.Patch(ctx, own.Name, types.MergePatchType, cordon, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})

	for name, tc := range map[string]struct {
		plugin bool
		node   string
		patch  []byte
		want   string // "" allowed, else part of the refusal
	}{
		"plugin: domain label on its node":     {plugin: true, node: own.Name, patch: label(cdv1beta1.ComputeDomainLabel, otherUID)},
		"plugin: domain label removed":         {plugin: true, node: own.Name, patch: unlabel(cdv1beta1.ComputeDomainLabel)},
		"plugin: domain label not a UID":       {plugin: true, node: own.Name, patch: label(cdv1beta1.ComputeDomainLabel, "uid-1"), want: "only to a ComputeDomain's UID"},
		"plugin: clique label on its node":     {plugin: true, node: own.Name, patch: label(cdv1beta1.GPUCliqueNodeLabel, "u.1")},
		"plugin: clique label not a clique id": {plugin: true, node: own.Name, patch: label(cdv1beta1.GPUCliqueNodeLabel, "Rack_1"), want: "only to a clique id"},
		"plugin: domain label on another node": {plugin: true, node: sibling.Name, patch: label(cdv1beta1.ComputeDomainLabel, otherUID), want: "only change its own node"},
		"plugin: another plane's node":         {plugin: true, node: foreign.Name, patch: label(cdv1beta1.ComputeDomainLabel, otherUID), want: "nodes assigned to their plane"},
		"plugin: taint its node":               {plugin: true, node: own.Name, patch: taint, want: "may only change the labels"},
		"plugin: other label on its node":      {plugin: true, node: own.Name, patch: label("role", "evil"), want: "may only change the labels"},
		"plugin: plane label on its node":      {plugin: true, node: own.Name, patch: label(cdv1beta1.ControlPlaneLabel, other)},
		"controller: domain label removed":     {node: sibling.Name, patch: unlabel(cdv1beta1.ComputeDomainLabel)},
		"controller: domain label set":         {node: sibling.Name, patch: label(cdv1beta1.ComputeDomainLabel, otherUID), want: "may only remove label"},
		"controller: another plane's node":     {node: foreign.Name, patch: unlabel(cdv1beta1.ComputeDomainLabel), want: "nodes assigned to their plane"},
		"controller: cordon":                   {node: own.Name, patch: cordon, want: "may only change the labels"},
		"controller: clique label":             {node: own.Name, patch: label(cdv1beta1.GPUCliqueNodeLabel, "u.1"), want: "may only change the labels"},
	} {
		t.Run(name, func(t *testing.T) {
			nodes := controller
			if tc.plugin {
				nodes = plugin
			}
			_, err := nodes.Patch(ctx, tc.node, types.MergePatchType, tc.patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
			switch {
			case name == "plugin: plane label on its node":
				// Refused by the ownership-label policy or this one; never admitted.
				if err == nil {
					t.Fatal("a plugin moved its node to another plane")
				}
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (!isAdmissionRefusal(err) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want an admission refusal saying %q", err, tc.want)
			}
		})
	}
}

// A leaked controller token may create only the daemon DaemonSet's shape in its driver
// namespace: never a privileged pod, another service account, or a pod on arbitrary nodes; and
// nothing but the daemon itself: the plane's image and command, no volumes (a Secret of the
// driver namespace), host ports, requests, priority class of its own choosing, SELinux or
// unconfined profiles, or claim but the domain's daemon template.
func TestControllerTokenCreatesOnlyDaemonDaemonSets(t *testing.T) {
	ctx := testContext(t)
	const id = "dspol"
	ns := installPlaneRights(t, id, "rbac-controller.yaml", "policy-daemonsets.yaml")
	controller := podBoundClient(t, ns, plane.Name(id, "cdplane-controller"), nil).AppsV1().DaemonSets(ns)
	daemonSA := plane.Name(id, "cdplane-daemon")
	chart, err := charts.Load(charts.Plane)
	if err != nil {
		t.Fatal(err)
	}
	const uid = "5f0c2a7e-8b1d-4c3e-9a26-0d7e4b9f1c38"
	good := func() *appsv1.DaemonSet {
		name := cdv1beta1.DaemonSetName(uid)
		ds := testutil.MakeDaemonSet(name, ns).
			Selector(cdv1beta1.ComputeDomainLabel, uid).NodeSelector(cdv1beta1.ComputeDomainLabel, uid).
			ServiceAccount(daemonSA).Image("cdplane:" + chart.Metadata.AppVersion).Obj()
		pod := &ds.Spec.Template.Spec
		pod.Containers[0].Command = []string{"cdplane-daemon", "run"}
		pod.Containers[0].Args = []string{"--metrics-bind-address=$(POD_IP):9090", "--control-plane-id=" + id}
		pod.Containers[0].Ports = []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9090}}
		pod.Containers[0].Resources = corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "compute-domain-daemon"}}}
		pod.ResourceClaims = []corev1.PodResourceClaim{{Name: "compute-domain-daemon", ResourceClaimTemplateName: &name}}
		return ds
	}
	create := func(ds *appsv1.DaemonSet) error {
		_, err := controller.Create(ctx, ds, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	eventuallyRefused(t, "creating a privileged DaemonSet with the controller's token", func() error {
		ds := good()
		ds.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr(true)}
		return create(ds)
	})
	for name, tc := range map[string]struct {
		change func(*appsv1.DaemonSet)
		want   string
	}{
		"the daemon shape": {change: func(*appsv1.DaemonSet) {}},
		"privileged": {change: func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr(true)}
		}, want: "may not run privileged"},
		"added capability": {change: func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}
		}, want: "may not run privileged"},
		"host network": {change: func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.HostNetwork = true }, want: "host-namespace"},
		"host path": {change: func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}, want: "host paths"},
		"another service account": {change: func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.ServiceAccountName = plane.Name(id, "cdplane-kubelet-plugin")
		}, want: "daemon service account"},
		"every node":   {change: func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.NodeSelector = nil }, want: "exactly the nodes labelled for its domain"},
		"another name": {change: func(ds *appsv1.DaemonSet) { ds.Name = "miner" }, want: "computedomain-daemon-<cdUID>"},
		"a name that is no UID": {change: func(ds *appsv1.DaemonSet) {
			ds.Name = cdv1beta1.DaemonSetName("x")
			ds.Spec.Selector.MatchLabels[cdv1beta1.ComputeDomainLabel] = "x"
			ds.Spec.Template.Labels[cdv1beta1.ComputeDomainLabel] = "x"
			ds.Spec.Template.Spec.NodeSelector[cdv1beta1.ComputeDomainLabel] = "x"
		}, want: "a ComputeDomain's UID"},
		"another image":   {change: func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = "miner:latest" }, want: "one container, of image"},
		"another command": {change: func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Command = []string{"sh", "-c", "mine"} }, want: "with command cdplane-daemon run"},
		"another argument": {change: func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Containers[0].Args = append(ds.Spec.Template.Spec.Containers[0].Args, "--config=/evil")
		}, want: "no arguments but the metrics endpoint's"},
		"a second container": {change: func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Containers = append(ds.Spec.Template.Spec.Containers, corev1.Container{Name: "side", Image: "miner"})
		}, want: "runs one container"},
		"a Secret volume": {change: func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "plane-secret"}}}}
		}, want: "no volumes"},
		"a host port": {change: func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Containers[0].Ports[0].HostPort = 9090
		}, want: "host ports"},
		"large requests": {change: func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}
		}, want: "resource requests"},
		"node-critical priority": {change: func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.PriorityClassName = "system-node-critical" }, want: "priority class"},
		"spc_t": {change: func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.SecurityContext = &corev1.PodSecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Type: "spc_t"}}
		}, want: "no SELinux options"},
		"unconfined seccomp": {change: func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
		}, want: "unconfined seccomp"},
		"another domain's daemon template": {change: func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.ResourceClaims[0].ResourceClaimTemplateName = ptr(cdv1beta1.DaemonSetName("7e21d9c4-3b5f-4a86-b0d2-9c1e6f84a513"))
		}, want: "daemon claim template"},
	} {
		t.Run(name, func(t *testing.T) {
			ds := good()
			tc.change(ds)
			err := create(ds)
			checkAdmission(t, name, err, tc.want)
		})
	}
}
