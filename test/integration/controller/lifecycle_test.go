package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
)

// TestCreatedObjects checks the exact names, labels, selectors and owners of what a domain gets.
func TestCreatedObjects(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	cd := e.createCD("objects", 1)
	uid := string(cd.UID)
	name := "computedomain-daemon-" + uid

	ds := &appsv1.DaemonSet{}
	e.eventually(2*time.Minute, "DaemonSet created", func() (bool, error) {
		return e.c.Get(context.Background(), client.ObjectKey{Namespace: e.driverNS, Name: name}, ds) == nil, nil
	})
	wantLabels := map[string]string{cdv1beta1.ComputeDomainLabel: uid, "app.kubernetes.io/managed-by": "cdplane"}
	if diff := cmp.Diff(wantLabels, ds.Labels); diff != "" {
		t.Errorf("DaemonSet labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{cdv1beta1.ComputeDomainLabel: uid}, ds.Spec.Selector.MatchLabels); diff != "" {
		t.Errorf("DaemonSet selector (-want +got):\n%s", diff)
	}
	pod := ds.Spec.Template.Spec
	if diff := cmp.Diff(map[string]string{cdv1beta1.ComputeDomainLabel: uid}, pod.NodeSelector); diff != "" {
		t.Errorf("DaemonSet node selector (-want +got):\n%s", diff)
	}
	if len(pod.Tolerations) != 1 || pod.Tolerations[0].Operator != corev1.TolerationOpExists || pod.Tolerations[0].Key != "" {
		t.Errorf("DaemonSet does not tolerate all taints: %+v", pod.Tolerations)
	}
	ctr := pod.Containers[0]
	wantProbe := []string{"cdplane-daemon", "check"}
	if ctr.ReadinessProbe == nil || !cmp.Equal(ctr.ReadinessProbe.Exec.Command, wantProbe) ||
		ctr.StartupProbe == nil || !cmp.Equal(ctr.StartupProbe.Exec.Command, wantProbe) {
		t.Errorf("probes do not call the daemon's check: readiness %+v startup %+v", ctr.ReadinessProbe, ctr.StartupProbe)
	}
	if len(pod.ResourceClaims) != 1 || *pod.ResourceClaims[0].ResourceClaimTemplateName != name {
		t.Errorf("daemon pod claims %+v, want template %s", pod.ResourceClaims, name)
	}
	// The daemons learn ComputeDomainCliques (they wait for their clique rather than read the
	// domain's status); a flip leaves this DaemonSet as it is (TestGateFlipKeepsDomainsReady).
	gates := ""
	for _, env := range ctr.Env {
		if env.Name == "FEATURE_GATES" {
			gates = env.Value
		}
	}
	if !containsString(gates, "ComputeDomainCliques=true") {
		t.Errorf("the daemons' FEATURE_GATES %q do not pass ComputeDomainCliques=true", gates)
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
		t.Errorf("DaemonSet update strategy %s, want OnDelete: a changed template would replace running daemons", ds.Spec.UpdateStrategy.Type)
	}

	wl := &resourcev1.ResourceClaimTemplate{}
	if err := e.c.Get(e.ctx(), client.ObjectKey{Namespace: e.ns, Name: "objects-channel"}, wl); err != nil {
		t.Fatalf("workload ResourceClaimTemplate: %v", err)
	}
	req := wl.Spec.Spec.Devices.Requests[0]
	if req.Exactly.DeviceClassName != cdv1beta1.ChannelDeviceClass {
		t.Errorf("workload template device class %q", req.Exactly.DeviceClassName)
	}
	wantCfg := fmt.Sprintf(`{"kind":"ComputeDomainChannelConfig","apiVersion":"resource.nvidia.com/v1beta1","domainID":%q,"allocationMode":"Single"}`, uid)
	if got := string(wl.Spec.Spec.Devices.Config[0].Opaque.Parameters.Raw); got != wantCfg || wl.Spec.Spec.Devices.Config[0].Opaque.Driver != cdv1beta1.DriverName {
		t.Errorf("workload opaque config %s for driver %s, want %s", got, wl.Spec.Spec.Devices.Config[0].Opaque.Driver, wantCfg)
	}
	if len(wl.OwnerReferences) != 1 || wl.OwnerReferences[0].UID != cd.UID {
		t.Errorf("workload template owners %+v, want the ComputeDomain", wl.OwnerReferences)
	}
	dt := &resourcev1.ResourceClaimTemplate{}
	if err := e.c.Get(e.ctx(), client.ObjectKey{Namespace: e.driverNS, Name: name}, dt); err != nil {
		t.Fatalf("daemon ResourceClaimTemplate: %v", err)
	}
	if dt.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName != cdv1beta1.DaemonDeviceClass {
		t.Errorf("daemon template device class %q", dt.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName)
	}
	got := e.getCD(cd)
	if len(got.Finalizers) != 1 || got.Finalizers[0] != cdv1beta1.Finalizer {
		t.Errorf("finalizers %v", got.Finalizers)
	}

	// A daemon joins: its clique is named, labelled and owned as the API says.
	node := e.addNode(cd, "n1")
	e.startDaemon(cd, node, testClique)
	e.waitStatus(cd, cdv1beta1.StatusReady, 20*time.Second)
	clique := &cdv1beta1.ComputeDomainClique{}
	if err := e.c.Get(e.ctx(), client.ObjectKey{Namespace: e.driverNS, Name: uid + "." + testClique}, clique); err != nil {
		t.Fatalf("clique: %v", err)
	}
	if clique.Labels[cdv1beta1.ComputeDomainLabel] != uid || clique.Labels[cdv1beta1.CliqueIDLabel] != testClique {
		t.Errorf("clique labels %v", clique.Labels)
	}
	if len(clique.OwnerReferences) != 1 || clique.OwnerReferences[0].UID != ds.UID || clique.OwnerReferences[0].Kind != "DaemonSet" {
		t.Errorf("clique owners %+v, want DaemonSet %s", clique.OwnerReferences, ds.UID)
	}
}

// TestReadinessAndDeletion follows a 2-node domain from creation to deletion.
func TestReadinessAndDeletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	cd := e.createCD("lifecycle", 2)
	n1, n2 := e.addNode(cd, "n1"), e.addNode(cd, "n2")
	d1 := e.startDaemon(cd, n1, testClique)
	e.waitStatus(cd, cdv1beta1.StatusNotReady, 10*time.Second)
	d2 := e.startDaemon(cd, n2, testClique)

	// Ready once the last daemon pod is Ready (how fast is the benchmark's business).
	waitPodReady(t, e, d2)
	got := e.waitStatus(cd, cdv1beta1.StatusReady, 60*time.Second)
	if got.Status.ReadyNodes != 2 || got.Status.TotalNodes != 2 || len(got.Status.Cliques) != 1 || got.Status.Cliques[0].Ready != 2 {
		t.Errorf("status counts: ready=%d total=%d cliques=%+v", got.Status.ReadyNodes, got.Status.TotalNodes, got.Status.Cliques)
	}
	// Both IMEX instances are connected to each other.
	e.eventually(2*time.Minute, "IMEX peers connected", func() (bool, error) {
		st, err := d1.status()
		return err == nil && cmp.Equal(st.Connected, []string{d2.ip}) && cmp.Equal(st.Inbound, []string{d2.ip}), err
	})

	// A daemon leaving (node label removed): NotReady.
	e.unlabelNode(n2)
	got = e.waitStatus(cd, cdv1beta1.StatusNotReady, 60*time.Second)
	if _, ok := entryOf(got, n2); ok {
		t.Errorf("node %s still listed after losing the label", n2)
	}
	// The remaining IMEX drops the peer that left.
	e.eventually(2*time.Minute, "IMEX dropped the departed peer", func() (bool, error) {
		st, err := d1.status()
		return err == nil && len(st.Connected) == 0, err
	})

	// Deletion: everything created for the domain goes, node labels go, then the domain.
	if err := e.c.Delete(e.ctx(), cd); err != nil {
		t.Fatal(err)
	}
	e.eventually(2*time.Minute, "ComputeDomain deleted", func() (bool, error) {
		err := e.c.Get(context.Background(), client.ObjectKeyFromObject(cd), &cdv1beta1.ComputeDomain{})
		return apierrors.IsNotFound(err), nil
	})
	uid := string(cd.UID)
	for _, obj := range []client.Object{
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: e.driverNS, Name: cdv1beta1.DaemonSetName(uid)}},
		&resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: e.driverNS, Name: cdv1beta1.DaemonSetName(uid)}},
		&resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "lifecycle-channel"}},
		&cdv1beta1.ComputeDomainClique{ObjectMeta: metav1.ObjectMeta{Namespace: e.driverNS, Name: cdv1beta1.CliqueName(uid, testClique)}},
	} {
		if err := e.c.Get(e.ctx(), client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s left behind (err=%v)", obj, obj.GetName(), err)
		}
	}
	nodes := &corev1.NodeList{}
	if err := e.c.List(e.ctx(), nodes, client.MatchingLabels{cdv1beta1.ComputeDomainLabel: uid}); err != nil || len(nodes.Items) != 0 {
		t.Errorf("nodes still labelled for the deleted domain: %d (err=%v)", len(nodes.Items), err)
	}
	_ = n1
}

func waitPodReady(t *testing.T, e *env, n *node) time.Time {
	t.Helper()
	var at time.Time
	e.eventually(2*time.Minute, "daemon pod on "+n.name+" Ready", func() (bool, error) {
		pod := &corev1.Pod{}
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(n.pod), pod); err != nil {
			return false, err
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				at = time.Now()
				return true, nil
			}
		}
		return false, nil
	})
	return at
}

func containsString(s, sub string) bool {
	return len(sub) > 0 && len(s) >= len(sub) && (s == sub || indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}
