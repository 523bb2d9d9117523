// Package lifecycle installs, upgrades and destroys the prerequisites and two control planes
// through `cdplane install|apply|destroy` (internal/lifecycle, on the Helm SDK) against a real
// apiserver with kube-controller-manager (garbage collection, namespace deletion), running each
// plane's controller in-process as the plane's own service account, so the chart's RBAC is what
// it works with.
package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	charts "cdplane/deployments/helm"
	"cdplane/internal/controller"
	"cdplane/internal/controller/computedomain"
	"cdplane/internal/lifecycle"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
	"cdplane/internal/testutil/cluster"
)

var testCluster *cluster.Cluster

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	if os.Getenv("DEBUG_LOG") != "" {
		ctrl.SetLogger(klog.Background())
	}
	os.Exit(cluster.Main(m, cluster.Options{
		NoCRDs:            true,
		ControllerManager: true,
		Controllers:       []string{"garbagecollector", "namespace", "clusterrole-aggregation"},
	}, &testCluster))
}

func newManager(t *testing.T) (*lifecycle.Manager, *testutil.SyncBuffer) {
	t.Helper()
	kubeconfig, err := testCluster.AdminKubeconfig("lifecycle")
	if err != nil {
		t.Fatal(err)
	}
	out := &testutil.SyncBuffer{}
	m, err := lifecycle.New(lifecycle.Options{Getter: lifecycle.KubeconfigGetter(kubeconfig, ""), Out: out, Timeout: 2 * time.Minute, Poll: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return m, out
}

// lifecycleTest starts a test that installs and removes planes: a manager with its output,
// whatever the test installs (plane id, and the prerequisites) removed after it, and that
// output in the log when it fails.
func lifecycleTest(t *testing.T, id string) (*lifecycle.Manager, *testutil.SyncBuffer) {
	t.Helper()
	m, out := newManager(t)
	leaveNothing(t, id)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cdplane output:\n%s", out.String())
		}
	})
	return m, out
}

// serviceAccount returns a config acting as a plane's service account (legacy name sa), as
// its pods' tokens would.
func serviceAccount(id, sa string) *rest.Config {
	ns := plane.Name(id, plane.DriverNamespaceLegacyName)
	cfg := rest.CopyConfig(testCluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + plane.Name(id, sa),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	return cfg
}

// runController runs plane id's controller in-process as the plane's controller service
// account; it returns a stop function.
func runController(t *testing.T, id string) func() {
	t.Helper()
	// The image the chart renders, which its daemonset-shape policy pins the controller to.
	chart, err := charts.Load(charts.Plane)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := controller.NewManager(context.Background(), serviceAccount(id, "cdplane-controller"), controller.Options{
		Options: computedomain.Options{
			DriverNamespace: plane.Name(id, plane.DriverNamespaceLegacyName), DaemonImage: "cdplane:" + chart.Metadata.AppVersion,
			DaemonServiceAccount: plane.Name(id, "cdplane-daemon"), ControlPlaneID: id,
		},
		SkipNameValidation: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return testutil.RunManager(t, mgr)
}

// readyDomain creates a one-node ComputeDomain in ns and plays its daemon: a node labelled for
// it and a Ready daemon pod in the plane's driver namespace, then waits for Ready.
func readyDomain(t *testing.T, id, ns, name string) *cdv1beta1.ComputeDomain {
	t.Helper()
	ctx := context.Background()
	c := testCluster.Client
	cd := testutil.MakeComputeDomain(name).Namespace(ns).NumNodes(1).Obj()
	if err := c.Create(ctx, cd); err != nil {
		t.Fatal(err)
	}
	if got := cd.Labels[cdv1beta1.ControlPlaneLabel]; got != id {
		t.Fatalf("ComputeDomain %s/%s: plane label %q after create, want %q stamped by the admission policy", ns, name, got, id)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name, Labels: plane.Stamp(id, map[string]string{cdv1beta1.ComputeDomainLabel: string(cd.UID)})}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), node) })
	// A node counts only with a channel claim of the domain allocated there, and a daemon only
	// as a pod of the domain's DaemonSet.
	allocateChannelClaim(t, cd, node.Name)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "daemon-" + name, Namespace: plane.Name(id, plane.DriverNamespaceLegacyName),
			Labels: plane.Stamp(id, map[string]string{
				cdv1beta1.ComputeDomainLabel: string(cd.UID), cdv1beta1.CliqueIDLabel: "clique-1",
				"app.kubernetes.io/managed-by": "cdplane",
			}),
			OwnerReferences: []metav1.OwnerReference{daemonSetRef(t, id, cd)},
		},
		Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "daemon", Image: "cdplane:test"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.PodIP = "127.0.0.1"
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitReady(t, cd)
	return cd
}

// allocateChannelClaim creates a claim of the domain's channel, as its workload template makes
// one (with the domain's labels, its plane's included), and writes the allocation the scheduler writes for it on node.
func allocateChannelClaim(t *testing.T, cd *cdv1beta1.ComputeDomain, node string) {
	t.Helper()
	ctx := context.Background()
	raw, err := json.Marshal(cdv1beta1.NewChannelConfig(string(cd.UID), cdv1beta1.AllocationModeSingle))
	if err != nil {
		t.Fatal(err)
	}
	config := resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: cdv1beta1.DriverName, Parameters: runtime.RawExtension{Raw: raw}}}
	claim := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: "channel-" + node, Namespace: cd.Namespace,
			Labels: plane.Stamp(cd.Labels[cdv1beta1.ControlPlaneLabel], map[string]string{
				cdv1beta1.ComputeDomainLabel: string(cd.UID), "app.kubernetes.io/managed-by": "cdplane",
			}),
		},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "channel", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: cdv1beta1.ChannelDeviceClass}}},
			Config:   []resourcev1.DeviceClaimConfiguration{{Requests: []string{"channel"}, DeviceConfiguration: config}},
		}},
	}
	if err := testCluster.Client.Create(ctx, claim); err != nil {
		t.Fatalf("channel claim for %s: %v", node, err)
	}
	claim.Status.Allocation = &resourcev1.AllocationResult{
		Devices: resourcev1.DeviceAllocationResult{
			Results: []resourcev1.DeviceRequestAllocationResult{{Request: "channel", Driver: cdv1beta1.DriverName, Pool: node, Device: "channel-0"}},
			Config:  []resourcev1.DeviceAllocationConfiguration{{Source: resourcev1.AllocationConfigSourceClaim, Requests: []string{"channel"}, DeviceConfiguration: config}},
		},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
		}}}}},
	}
	if err := testCluster.Client.Status().Update(ctx, claim); err != nil {
		t.Fatalf("allocating the channel claim on %s: %v", node, err)
	}
}

// endWorkload deletes the domain's channel claims, as the end of its workload's pods does.
func endWorkload(t *testing.T, cd *cdv1beta1.ComputeDomain) {
	t.Helper()
	err := testCluster.Client.DeleteAllOf(context.Background(), &resourcev1.ResourceClaim{},
		client.InNamespace(cd.Namespace), client.MatchingLabels{cdv1beta1.ComputeDomainLabel: string(cd.UID)})
	if err != nil {
		t.Fatal(err)
	}
}

// daemonSetRef waits for the domain's daemon DaemonSet, which the plane's controller creates,
// and returns a controller reference to it.
func daemonSetRef(t *testing.T, id string, cd *cdv1beta1.ComputeDomain) metav1.OwnerReference {
	t.Helper()
	ds := &appsv1.DaemonSet{}
	key := client.ObjectKey{Namespace: plane.Name(id, plane.DriverNamespaceLegacyName), Name: cdv1beta1.DaemonSetName(string(cd.UID))}
	testutil.Eventually(t, time.Minute, "DaemonSet "+key.String(), func() (bool, error) {
		err := testCluster.Client.Get(context.Background(), key, ds)
		return err == nil, err
	})
	controller := true
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: &controller}
}

// playKubelet stands in for the kubelets of the test's nodes, which a pod's graceful deletion
// waits for: pods being deleted in the planes' driver namespaces are removed at once.
func playKubelet(t *testing.T, ids ...string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			for _, id := range ids {
				pods := &corev1.PodList{}
				if err := testCluster.Client.List(ctx, pods, client.InNamespace(plane.Name(id, plane.DriverNamespaceLegacyName))); err != nil {
					continue
				}
				for i := range pods.Items {
					if p := &pods.Items[i]; p.DeletionTimestamp != nil {
						_ = testCluster.Client.Delete(ctx, p, client.GracePeriodSeconds(0))
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
}

func waitReady(t *testing.T, cd *cdv1beta1.ComputeDomain) {
	t.Helper()
	testutil.Eventually(t, time.Minute, "ComputeDomain "+cd.Namespace+"/"+cd.Name+" Ready", func() (bool, error) {
		cur := &cdv1beta1.ComputeDomain{}
		if err := testCluster.Client.Get(context.Background(), client.ObjectKeyFromObject(cd), cur); err != nil {
			return false, err
		}
		if cur.Status.Status == cdv1beta1.StatusReady {
			return true, nil
		}
		return false, fmt.Errorf("status %q, finalizers %v, conditions %+v", cur.Status.Status, cur.Finalizers, cur.Status.Conditions)
	})
}

// labelled returns every object in the cluster carrying the plane label with value id, as
// "<resource> <namespace>/<name>" → resourceVersion, found through discovery.
func labelled(t *testing.T, id string) map[string]string {
	t.Helper()
	return scan(t, metav1.ListOptions{LabelSelector: cdv1beta1.ControlPlaneLabel + "=" + id}, nil)
}

// scan lists every listable resource with opts (and a keep filter on names) through the
// metadata API.
func scan(t *testing.T, opts metav1.ListOptions, keep func(gvr schema.GroupVersionResource, name string) bool) map[string]string {
	t.Helper()
	disc, err := discovery.NewDiscoveryClientForConfig(testCluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	lists, err := disc.ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	quiet := rest.CopyConfig(testCluster.Config)
	quiet.WarningHandler = rest.NoWarnings{}
	meta, err := metadata.NewForConfig(quiet)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !contains(r.Verbs, "list") || r.Name == "events" {
				continue
			}
			gvr := gv.WithResource(r.Name)
			items, err := meta.Resource(gvr).List(context.Background(), opts)
			if apierrors.IsNotFound(err) {
				// Discovery still listed a resource whose CRD was just deleted: none left.
				continue
			}
			if err != nil {
				t.Fatalf("listing %s: %v", gvr, err)
			}
			for _, it := range items.Items {
				if keep == nil || keep(gvr, it.Name) {
					out[gvr.Resource+"."+gvr.Group+" "+it.Namespace+"/"+it.Name] = it.ResourceVersion
				}
			}
		}
	}
	return out
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
