package secretmirror

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
)

// secretVerbs are the Secret rights the plane's RBAC grants, in its source namespace and in each
// namespace assigned to it.
var secretVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete"}

// namespacedRights gives a service account of the source namespace the rights a plane's
// controller has with namespaced RBAC only: Secrets in the source namespace (a Role) and in each
// target (a RoleBinding to the ClusterRole <id>-cdplane-controller-namespaced), namespaces
// cluster-wide (read), Events in the source namespace. It returns a config impersonating the
// service account, the RoleBinding of each target, and a client with that config, once the
// apiserver enforces exactly these rights: Secrets readable in the source namespace and the
// targets, and not cluster-wide.
func (e *env) namespacedRights(targets ...string) (*rest.Config, map[string]*rbacv1.RoleBinding, client.Client) {
	e.T.Helper()
	id := e.opts.ControlPlaneID
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "controller", Namespace: e.srcNS}}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: sa.Namespace}}
	namespaced := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: id + "-cdplane-controller-namespaced"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: secretVerbs}},
	}
	nsReader := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: id + "-cdplane-controller-namespaces"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}}},
	}
	nsReaderBinding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: nsReader.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: nsReader.Name},
		Subjects:   subjects,
	}
	source := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: id + "-cdplane-controller", Namespace: e.srcNS},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: secretVerbs},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
		},
	}
	sourceBinding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: source.Name, Namespace: e.srcNS},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: source.Name},
		Subjects:   subjects,
	}
	objs := []client.Object{sa, namespaced, nsReader, nsReaderBinding, source, sourceBinding}
	bindings := map[string]*rbacv1.RoleBinding{}
	for _, ns := range targets {
		bindings[ns] = &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: id + "-cdplane-controller", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: namespaced.Name},
			Subjects:   subjects,
		}
		objs = append(objs, bindings[ns])
	}
	for _, o := range objs {
		if err := e.C.Create(e.Ctx(), o); err != nil {
			e.T.Fatal(err)
		}
		if o.GetNamespace() == "" {
			e.T.Cleanup(func() { _ = e.C.Delete(context.Background(), o) })
		}
	}

	cfg := rest.CopyConfig(testCluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: fmt.Sprintf("system:serviceaccount:%s:%s", sa.Namespace, sa.Name)}
	c, err := client.New(cfg, client.Options{Scheme: testCluster.Scheme})
	if err != nil {
		e.T.Fatal(err)
	}
	e.Eventually(30*time.Second, "the service account's Secret rights in force", func() (bool, error) {
		for _, ns := range append([]string{e.srcNS}, targets...) {
			if err := c.List(context.Background(), &corev1.SecretList{}, client.InNamespace(ns)); err != nil {
				return false, err
			}
		}
		return true, nil
	})
	if err := c.List(e.Ctx(), &corev1.SecretList{}); !apierrors.IsForbidden(err) {
		e.T.Fatalf("listing Secrets cluster-wide as the service account: %v, want Forbidden", err)
	}
	return cfg, bindings, c
}

// TestNamespacedRBACOnly runs the mirror as a service account whose only Secret rights are a
// Role in the source namespace and RoleBindings in the targets (as the per-plane RBAC grants),
// with a 2-second ResyncInterval:
//   - the copies converge, for a source made before the start and one made after;
//   - a copy deleted, and one edited, by someone else come back at the next resync;
//   - a namespace unlabelled while its RoleBinding remains loses its copies, the other target
//     keeps its own untouched;
//   - a namespace unlabelled after its RoleBinding was removed keeps its copy: the sweep is
//     forbidden, which is logged once at V(1) and not retried;
//   - nothing the mirror logged is an error about a cluster-wide request.
func TestNamespacedRBACOnly(t *testing.T) {
	t.Parallel()
	e := newPlane(t)
	e.opts.ResyncInterval = 2 * time.Second
	t1, t2, t3 := e.target("sm-rbac-t1-"), e.target("sm-rbac-t2-"), e.target("sm-rbac-t3-")
	cfg, bindings, sa := e.namespacedRights(t1, t2, t3)
	early, late := map[string]string{"token": "early"}, map[string]string{"token": "late"}
	e.createSource("early", early)

	e.startAs(cfg)
	e.createSource("late", late)
	for _, ns := range []string{t1, t2, t3} {
		e.waitCopy(ns, "early", early)
		e.waitCopy(ns, "late", late)
	}

	// Healed by the resync: copies are not watched.
	if err := e.C.Delete(e.Ctx(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: t1, Name: "early"}}); err != nil {
		t.Fatal(err)
	}
	e.updateSecret(t2, "early", func(s *corev1.Secret) { s.Data["token"] = []byte("tampered") })
	e.waitCopy(t1, "early", early)
	e.waitCopy(t2, "early", early)

	// Unassigned with its RoleBinding in place: the copies go, t1's stay as they are.
	kept := e.waitCopy(t1, "late", late)
	e.setNamespaceLabel(t2, cdv1beta1.ControlPlaneLabel, nil)
	e.waitGone(t2, "early")
	e.waitGone(t2, "late")
	e.assertUntouched(t1, "late", kept.ResourceVersion, late)
	if errs := e.logs.errors(); len(errs) != 0 {
		t.Errorf("the mirror logged %d errors with all its rights in place, first: %s: %v", len(errs), errs[0].msg, errs[0].err)
	}

	// Unassigned after its RoleBinding went: the sweep is forbidden and leaves the copy. Until
	// the label goes, t3 is a target the mirror cannot write: those reconciles fail, expectedly.
	left, err := e.get(t3, "early")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.C.Delete(e.Ctx(), bindings[t3]); err != nil {
		t.Fatal(err)
	}
	e.Eventually(30*time.Second, "Secrets in "+t3+" forbidden to the service account", func() (bool, error) {
		err := sa.List(context.Background(), &corev1.SecretList{}, client.InNamespace(t3))
		return apierrors.IsForbidden(err), err
	})
	e.setNamespaceLabel(t3, cdv1beta1.ControlPlaneLabel, nil)
	forbiddenSweep := func(l logRecord) bool {
		return l.level == 1 && strings.HasPrefix(l.msg, "Cannot list the copies in a namespace that left") && l.has("namespace", t3)
	}
	e.waitLog("the forbidden sweep of "+t3+" logged at V(1)", forbiddenSweep)
	// Two resync passes later, the sweep has not been retried.
	passes := len(e.logs.find(e.mirrored("early")))
	e.Eventually(30*time.Second, "two more resync passes", func() (bool, error) {
		return len(e.logs.find(e.mirrored("early"))) >= passes+2, nil
	})
	if n := len(e.logs.find(forbiddenSweep)); n != 1 {
		t.Errorf("the forbidden sweep of %s was logged %d times, want once (not retried)", t3, n)
	}
	e.assertUntouched(t3, "early", left.ResourceVersion, early)

	for _, l := range e.logs.errors() {
		if msg := l.err.Error(); strings.Contains(msg, "cluster scope") || !strings.Contains(msg, t3) {
			t.Errorf("unexpected error logged: %s: %v", l.msg, l.err)
		}
	}
}
