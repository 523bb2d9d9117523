// Package planes tests control-plane assignment and the ownership admission policies against a
// real kube-apiserver: `cdplane assign|unassign` and internal/plane's Assign/Unassign, the
// MutatingAdmissionPolicy that stamps a ComputeDomain's plane label from its namespace, and the
// ValidatingAdmissionPolicies that protect the label, with real RBAC and real identities (client
// certificates, service-account tokens).
package planes

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/domainlabel"
	"cdplane/internal/testutil"
	"cdplane/internal/testutil/cluster"
	"cdplane/internal/testutil/prereqs"
)

var testCluster *cluster.Cluster

// MutatingAdmissionPolicy is GA (admissionregistration.k8s.io/v1, on by default) since
// kube-apiserver 1.36: the cluster needs no extra flags.
func TestMain(m *testing.M) {
	os.Exit(cluster.Main(m, cluster.Options{}, &testCluster))
}

const (
	manifestFile = "ownership-policies.yaml"
	planeA       = "plane-a"
	planeB       = "plane-b"
	probePlane   = "probe"
)

var (
	manifestsOnce sync.Once
	manifestsErr  error
)

// installPolicies creates the objects of the prerequisites chart's ownership-policies.yaml (and
// its parameters ConfigMap) once per test binary, as `helm install` would, and waits until the apiserver enforces all three
// policies.
func installPolicies(t *testing.T) {
	t.Helper()
	manifestsOnce.Do(func() {
		start := time.Now()
		if manifestsErr = createManifest(manifestFile); manifestsErr == nil {
			manifestsErr = waitPoliciesEnforced()
		}
		fmt.Fprintf(os.Stderr, "ownership policies installed and enforced in %s\n", time.Since(start).Round(time.Millisecond))
	})
	if manifestsErr != nil {
		t.Fatalf("installing %s: %v", manifestFile, manifestsErr)
	}
}

func createManifest(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return prereqs.Create(ctx, testCluster.Client, name)
}

// waitPoliciesEnforced probes each policy until it acts (their type-checking status is written
// by kube-controller-manager, not running here; a CEL error shows as a refusal naming it): a probe domain is stamped in an assigned namespace, a forged label
// is refused in an unassigned one, and a non-administrator cannot label a namespace.
func waitPoliciesEnforced() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := testCluster.Client
	assigned := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-assigned-",
		Labels: map[string]string{cdv1beta1.ControlPlaneLabel: probePlane}}}
	free := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-free-"}}
	for _, ns := range []*corev1.Namespace{assigned, free} {
		if err := c.Create(ctx, ns); err != nil {
			return fmt.Errorf("creating probe namespace: %w", err)
		}
	}
	if err := waitStamped(ctx, c, assigned.Name, probePlane); err != nil {
		return fmt.Errorf("the mutating policy never stamped a domain (or, before 1.36, the validating policy never admitted the namespace's label): %w", err)
	}
	if err := poll(ctx, func() (bool, error) {
		cd := testutil.MakeComputeDomain("probe").Namespace(free.Name).Label(cdv1beta1.ControlPlaneLabel, probePlane).Obj()
		err := c.Create(ctx, cd, client.DryRunAll)
		return err != nil && apierrors.IsForbidden(err), err
	}); err != nil {
		return fmt.Errorf("the validating policy never refused a forged domain label: %w", err)
	}
	user, err := newIdentity(ctx, "probe-label-editor", nil)
	if err != nil {
		return err
	}
	if err := user.bindClusterRole(ctx, labelEditorRole); err != nil {
		return err
	}
	if err := poll(ctx, func() (bool, error) {
		err := setLabel(ctx, user.c, &corev1.Namespace{}, client.ObjectKey{Name: free.Name}, ptr(probePlane), client.DryRunAll)
		return isPolicyRefusal(err), err
	}); err != nil {
		return fmt.Errorf("the label policy never refused a non-administrator: %w", err)
	}
	return nil
}

// mutatingPolicyServed says whether the test cluster serves MutatingAdmissionPolicy v1
// (Kubernetes 1.36 and later): before that, the ownership policies' mutating half is not
// installed and a plane's controller labels domains itself (internal/controller/domainlabel,
// tested in test/integration/controller and the oldest-release e2e scenarios).
var mutatingPolicyServed = sync.OnceValues(func() (bool, error) {
	return domainlabel.MutatingPolicyServed(testCluster.Config)
})

// waitStamped dry-runs the creation of a domain in ns until admission stamps it with plane: the
// policies read namespaces from the apiserver's cache, which follows a label change shortly
// after it is written. Where no mutating policy is served, it waits instead until the
// validating policy sees the namespace's label: a domain labelled want is admitted (want ""):
// a labelled one is refused, the refusal saying the namespace has none).
func waitStamped(ctx context.Context, c client.Client, ns, want string) error {
	served, err := mutatingPolicyServed()
	if err != nil {
		return err
	}
	if !served {
		return poll(ctx, func() (bool, error) {
			label := want
			if want == "" {
				label = probePlane + "-absent"
			}
			cd := testutil.MakeComputeDomain("probe").Namespace(ns).Label(cdv1beta1.ControlPlaneLabel, label).Obj()
			err := c.Create(ctx, cd, client.DryRunAll)
			if want == "" {
				return err != nil && strings.Contains(err.Error(), "want none"), err
			}
			return err == nil, err
		})
	}
	return poll(ctx, func() (bool, error) {
		cd := testutil.MakeComputeDomain("probe").Namespace(ns).Obj()
		if err := c.Create(ctx, cd, client.DryRunAll); err != nil {
			return false, err
		}
		got, ok := cd.Labels[cdv1beta1.ControlPlaneLabel]
		if want == "" {
			return !ok, nil
		}
		return got == want, nil
	})
}

// poll runs cond every 50ms until it holds or ctx ends; the error names cond's last error.
func poll(ctx context.Context, cond func() (bool, error)) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			if last == nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), last)
		case <-tick.C:
		}
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func ptr[T any](v T) *T { return &v }

// isPolicyRefusal reports whether err is the label policy's refusal.
func isPolicyRefusal(err error) bool {
	return err != nil && apierrors.IsForbidden(err) &&
		bytes.Contains([]byte(err.Error()), []byte("only cluster administrators"))
}

// labelEditorRole lets its holder change namespaces and nodes, labels included, so that only
// admission stands between it and the plane label.
var labelEditorRole = &rbacv1.ClusterRole{
	ObjectMeta: metav1.ObjectMeta{Name: "planes-test-label-editor"},
	Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""},
		Resources: []string{"namespaces", "namespaces/status", "nodes", "nodes/status"},
		Verbs:     []string{"get", "list", "watch", "update", "patch", "create"},
	}, {
		APIGroups: []string{cdv1beta1.GroupVersion.Group},
		Resources: []string{"computedomains"},
		Verbs:     []string{"get", "list", "watch"},
	}},
}

// domainEditorRole grants what a tenant needs on ComputeDomains. The built-in edit role does not
// cover the CRD unless a role aggregated into it does (that needs kube-controller-manager's
// aggregation controller, not running here), so tenants get both.
var domainEditorRole = &rbacv1.ClusterRole{
	ObjectMeta: metav1.ObjectMeta{Name: "planes-test-computedomain-editor"},
	Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{cdv1beta1.GroupVersion.Group},
		Resources: []string{"computedomains"},
		Verbs:     []string{"get", "list", "watch", "create", "update", "patch", "delete"},
	}},
}

// setLabel reads obj by key and sets (value non-nil) or removes its plane label with a merge
// patch.
func setLabel(ctx context.Context, c client.Client, obj client.Object, key client.ObjectKey, value *string, opts ...client.PatchOption) error {
	if err := c.Get(ctx, key, obj); err != nil {
		return err
	}
	return c.Patch(ctx, obj, client.RawPatch("application/merge-patch+json", labelPatch(value)), opts...)
}

func labelPatch(value *string) []byte {
	if value == nil {
		return []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, cdv1beta1.ControlPlaneLabel))
	}
	return []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, cdv1beta1.ControlPlaneLabel, *value))
}
