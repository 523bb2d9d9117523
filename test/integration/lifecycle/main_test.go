// Package lifecycle installs, upgrades and destroys the prerequisites and two control planes
// through `cdplane install|apply|destroy` (internal/lifecycle, on the Helm SDK) against a real
// apiserver with kube-controller-manager (garbage collection, namespace deletion), running each
// plane's controller in-process as the plane's own service account, so the chart's RBAC is what
// it works with.
package lifecycle

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
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

// syncBuffer collects a manager's progress output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newManager(t *testing.T) (*lifecycle.Manager, *syncBuffer) {
	t.Helper()
	kubeconfig, err := testCluster.AdminKubeconfig("lifecycle")
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	m, err := lifecycle.New(lifecycle.Options{Kubeconfig: kubeconfig, Out: out, Timeout: 2 * time.Minute, Poll: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
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
	mgr, err := controller.NewManager(context.Background(), serviceAccount(id, "cdplane-controller"), controller.Options{
		Options: computedomain.Options{
			DriverNamespace: plane.Name(id, plane.DriverNamespaceLegacyName), DaemonImage: "cdplane:test",
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
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "daemon-" + name, Namespace: plane.Name(id, plane.DriverNamespaceLegacyName),
			Labels: plane.Stamp(id, map[string]string{
				cdv1beta1.ComputeDomainLabel: string(cd.UID), cdv1beta1.CliqueIDLabel: "clique-1",
				"app.kubernetes.io/managed-by": "cdplane",
			}),
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
