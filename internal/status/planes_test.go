package status

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/testutil"
)

// controller is a plane's controller Deployment as the plane chart renders it.
func controller(id, image string, args ...string) appsv1.Deployment {
	ns, name := "cdplane", "cdplane-controller"
	labels := map[string]string{nameLabel: controllerLegacyName, partOfLabel: partOfValue, versionLabel: "0.4.0"}
	if id != "" {
		ns, name = id+"-cdplane", id+"-cdplane-controller"
		labels[cdv1beta1.ControlPlaneLabel] = id
	}
	replicas := int32(2)
	return appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "controller", Image: image, Command: []string{"cdplane-controller"}, Args: args}},
		}}},
		Status: appsv1.DeploymentStatus{ReadyReplicas: 1},
	}
}

func objMeta(name string, labels ...string) metav1.PartialObjectMetadata {
	m := metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	for i := 0; i+1 < len(labels); i += 2 {
		m.Labels[labels[i]] = labels[i+1]
	}
	return m
}

func pluginPod(node string, ready bool) corev1.Pod {
	return *testutil.MakePod("plugin-"+node, "x").NodeName(node).Ready(ready).Obj()
}

func domain(ns, name, plane, status string) cdv1beta1.ComputeDomain {
	w := testutil.MakeComputeDomain(name).Namespace(ns)
	if plane != "" {
		w.Label(cdv1beta1.ControlPlaneLabel, plane)
	}
	cd := w.Obj()
	cd.Status.Status = status
	return *cd
}

func lease(holder string, acquired, renewed time.Time, seconds int32) *coordinationv1.Lease {
	a, r := metav1.NewMicroTime(acquired), metav1.NewMicroTime(renewed)
	return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, AcquireTime: &a, RenewTime: &r, LeaseDurationSeconds: &seconds}}
}

func TestBuildPlanes(t *testing.T) {
	pl := cdv1beta1.ControlPlaneLabel
	in := PlanesInput{
		Controllers: []appsv1.Deployment{
			controller("", "nvcr.io/cdplane:v0.4.0"),
			controller("a", "registry:5000/cdplane@sha256:abc", "--leader-election-id=custom-lease", "--max-nodes-per-imex-domain=9"),
			controller("b", "cdplane:v0.5.0", "--leader-elect=false"),
			// Not a chart installation: wrong namespace for its id.
			func() appsv1.Deployment { d := controller("c", "cdplane:v9"); d.Namespace = "elsewhere"; return d }(),
		},
		Nodes: []metav1.PartialObjectMetadata{
			objMeta("g1"), objMeta("g2"), objMeta("cpu-1"),
			objMeta("a1", pl, "a"), objMeta("a2", pl, "a"), objMeta("a3", pl, "a"),
			objMeta("z1", pl, "z"), objMeta("bad", pl, "Not-Valid"),
		},
		Namespaces: []metav1.PartialObjectMetadata{
			objMeta("kube-system"), objMeta("cdplane"), objMeta("legacy-team"), objMeta("idle"),
			objMeta("a-cdplane", pl, "a"), objMeta("team-a1", pl, "a"), objMeta("team-a2", pl, "a"),
		},
		Domains: []cdv1beta1.ComputeDomain{
			domain("legacy-team", "l1", "", "Ready"), domain("legacy-team", "l2", "", ""),
			domain("team-a1", "d1", "a", "Ready"), domain("team-a1", "d2", "a", "Ready"), domain("team-a2", "d3", "a", "NotReady"),
			domain("team-c", "d4", "c", "Ready"),
		},
		PluginPods: map[string][]corev1.Pod{
			"":  {pluginPod("g1", true), pluginPod("g2", false)},
			"a": {pluginPod("a1", true), pluginPod("a2", false), pluginPod("a2", true)},
		},
		Leases: map[string]*coordinationv1.Lease{
			"":  lease("cdplane-controller-abc", testNow.Add(-3*time.Hour-2*time.Minute), testNow.Add(-time.Second), 15),
			"a": lease("a-cdplane-controller-xyz", testNow.Add(-90*time.Second), testNow.Add(-time.Minute), 15),
		},
		Now: testNow,
	}
	acqLegacy, acqA := testNow.Add(-3*time.Hour-2*time.Minute), testNow.Add(-90*time.Second)
	want := Planes{ObservedAt: testNow, Planes: []Plane{
		{
			ID: "", Legacy: true, Installed: true, DriverNamespace: "cdplane", Version: "v0.4.0", Controller: Replicas{Desired: 2, Ready: 1},
			Nodes: 2, NodesPluginReady: 1, NodesCountedBy: CountedByKubeletPlugin,
			Namespaces: 1, NamespacesCountedBy: CountedByDomains, Domains: DomainCounts{Ready: 1, NotReady: 1},
			Leader: &Leader{Lease: "cdplane-controller", Election: true, Holder: "cdplane-controller-abc", AcquireTime: &acqLegacy, AgeSeconds: 3*3600 + 120},
		},
		{
			ID: "a", Installed: true, DriverNamespace: "a-cdplane", Version: "0.4.0", Controller: Replicas{Desired: 2, Ready: 1},
			Nodes: 3, NodesPluginReady: 2, NodesCountedBy: CountedByLabel,
			Namespaces: 2, NamespacesCountedBy: CountedByLabel, Domains: DomainCounts{Ready: 2, NotReady: 1},
			Leader: &Leader{Lease: "custom-lease", Election: true, Holder: "a-cdplane-controller-xyz", AcquireTime: &acqA, AgeSeconds: 90, Expired: true},
		},
		{
			ID: "b", Installed: true, DriverNamespace: "b-cdplane", Version: "v0.5.0", Controller: Replicas{Desired: 2, Ready: 1},
			NodesCountedBy: CountedByLabel, NamespacesCountedBy: CountedByLabel,
			Leader: &Leader{Lease: "b-cdplane-controller", Election: false},
		},
		{
			ID: "c", DriverNamespace: "c-cdplane", NodesCountedBy: CountedByLabel, NamespacesCountedBy: CountedByLabel,
			Domains: DomainCounts{Ready: 1},
		},
		{ID: "z", DriverNamespace: "z-cdplane", Nodes: 1, NodesCountedBy: CountedByLabel, NamespacesCountedBy: CountedByLabel},
	}}
	if diff := cmp.Diff(want, BuildPlanes(in)); diff != "" {
		t.Errorf("BuildPlanes (-want +got):\n%s", diff)
	}
}

func TestControllerArgs(t *testing.T) {
	cases := map[string]struct {
		dep          appsv1.Deployment
		wantLease    string
		wantElection bool
		wantMax      int
		wantVersion  string
	}{
		"chart defaults": {
			dep:       controller("a", "cdplane:v1", "--leader-elect=true", "--leader-election-id=a-cdplane-controller", "--max-nodes-per-imex-domain=18"),
			wantLease: "a-cdplane-controller", wantElection: true, wantMax: 18, wantVersion: "v1",
		},
		"no flags": {dep: controller("", "cdplane"), wantLease: "cdplane-controller", wantElection: true, wantMax: 18, wantVersion: "0.4.0"},
		"separate values, a registry port": {
			dep:       controller("a", "host:5000/cdplane", "--leader-election-id", "x", "--max-nodes-per-imex-domain", "4"),
			wantLease: "x", wantElection: true, wantMax: 4, wantVersion: "0.4.0",
		},
		"a bad max is the default": {
			dep:       controller("a", "cdplane:v2", "--max-nodes-per-imex-domain=zero", "--leader-elect=false"),
			wantLease: "a-cdplane-controller", wantElection: false, wantMax: 18, wantVersion: "v2",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			id, ok := PlaneOf(&tc.dep)
			if !ok {
				t.Fatalf("PlaneOf: not a plane's controller")
			}
			lease, election := LeaseOf(id, &tc.dep)
			got := []any{lease, election, MaxNodesPerClique(&tc.dep), VersionOf(&tc.dep)}
			if diff := cmp.Diff([]any{tc.wantLease, tc.wantElection, tc.wantMax, tc.wantVersion}, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlaneOf(t *testing.T) {
	mut := func(f func(d *appsv1.Deployment)) appsv1.Deployment {
		d := controller("a", "x:1")
		f(&d)
		return d
	}
	cases := map[string]struct {
		dep    appsv1.Deployment
		wantID string
		wantOK bool
	}{
		"legacy":               {dep: controller("", "x:1"), wantOK: true},
		"plane a":              {dep: controller("a", "x:1"), wantID: "a", wantOK: true},
		"another namespace":    {dep: mut(func(d *appsv1.Deployment) { d.Namespace = "cdplane" })},
		"another name":         {dep: mut(func(d *appsv1.Deployment) { d.Name = "cdplane-controller" })},
		"not part of cdplane":  {dep: mut(func(d *appsv1.Deployment) { delete(d.Labels, partOfLabel) })},
		"an invalid plane id":  {dep: mut(func(d *appsv1.Deployment) { d.Labels[cdv1beta1.ControlPlaneLabel] = "default" })},
		"another app's labels": {dep: mut(func(d *appsv1.Deployment) { d.Labels[nameLabel] = "cdplane-kubelet-plugin" })},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			id, ok := PlaneOf(&tc.dep)
			if id != tc.wantID && ok || ok != tc.wantOK {
				t.Errorf("PlaneOf = %q, %v; want %q, %v", id, ok, tc.wantID, tc.wantOK)
			}
		})
	}
}
