package simkubelet

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"cdplane/internal/sim/kubelet"
	"cdplane/internal/testutil"
)

// TestReadyRestoredAfterALapsedLease: the node lifecycle controller marks a node whose lease it
// saw lapse Unknown, and may do so after the lease is renewed again (its informers come back
// late from an apiserver restart). A kubelet whose lease failed then checks its Ready condition
// on every renewal for a while and writes its status when Ready is not its own, rather than
// leave the node unschedulable until its next periodic status report (5 minutes here). The
// renewals fail because the kubelet's identity may not write Leases at first; the node is marked
// Unknown as the controller would; then the identity gets Lease rights.
func TestReadyRestoredAfterALapsedLease(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const name, user = "sk-lapse", "sim-kubelet-lapse"
	// Everything a simulated kubelet writes but Leases; Lease rights come later.
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{"", "events.k8s.io", "resource.k8s.io", "storage.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"*"}},
	}
	bind(ctx, t, user+"-base", user, rules)
	cfg, err := testCluster.UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet's Lease requests the apiserver refuses, counted on its own connection: the
	// kubelet itself shows no failure the test could wait for.
	var refused atomic.Int64
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil && resp.StatusCode == http.StatusForbidden && strings.Contains(req.URL.Path, "/leases") {
				refused.Add(1)
			}
			return resp, err
		})
	})
	dir, err := os.MkdirTemp("", "skl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	k, err := kubelet.New(kubelet.Config{
		RESTConfig: cfg, StateDir: dir,
		Nodes: []kubelet.NodeSpec{{Name: name, InternalIP: "127.10.0.9", Capacity: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourcePods: resource.MustParse("10")}}},
		Runner:             kubelet.NewProcessRouter(map[string]string{kubelet.ImageRepository(sleeperImage): binDir}, ""),
		LeaseRenewInterval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(klog.NewContext(ctx, klog.Background().V(0)))
	done := make(chan error, 1)
	go func() { done <- k.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("the simulated kubelet: %v", err)
		}
		_ = kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})

	nodeReady := func() (corev1.ConditionStatus, error) {
		n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status, nil
			}
		}
		return "", fmt.Errorf("no Ready condition")
	}
	testutil.Eventually(t, time.Minute, "node "+name+" registered Ready", func() (bool, error) {
		s, err := nodeReady()
		return s == corev1.ConditionTrue, err
	})
	// Renewals are failing (no Lease rights); mark the node Unknown, as the node lifecycle
	// controller does when it sees the lease lapse.
	// Some renewals fail before Lease rights come.
	testutil.Eventually(t, time.Minute, "two of the kubelet's Lease requests refused", func() (bool, error) {
		return refused.Load() >= 2, nil
	})
	unknown := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"Unknown","reason":"NodeStatusUnknown","message":"Kubelet stopped posting node status.","lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`,
		time.Now().UTC().Format(time.RFC3339), time.Now().UTC().Format(time.RFC3339))
	if _, err := kube.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, []byte(unknown), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	if s, err := nodeReady(); err != nil || s != corev1.ConditionUnknown {
		t.Fatalf("node Ready after marking it Unknown: %s, %v", s, err)
	}
	bind(ctx, t, user+"-leases", user, []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"*"}},
	})
	// Its status report is 5 minutes away: only the check after the lapse can restore Ready.
	testutil.Eventually(t, 45*time.Second, "node "+name+" Ready again after its lease was renewed", func() (bool, error) {
		s, err := nodeReady()
		return s == corev1.ConditionTrue, err
	})
}

// bind gives user the rules cluster-wide (a ClusterRole and ClusterRoleBinding named name,
// removed at the end of the test).
func bind(ctx context.Context, t *testing.T, name, user string, rules []rbacv1.PolicyRule) {
	t.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = kube.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// roundTripFunc is an http.RoundTripper of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
