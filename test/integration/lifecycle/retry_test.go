package lifecycle

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"cdplane/internal/lifecycle"
	"cdplane/internal/testutil"
)

// cliThrough runs the CLI against the apiserver through proxy p and fails the test unless it
// exits with code and says every want.
func cliThrough(t *testing.T, kubeconfig string, code int, want []string, args ...string) string {
	t.Helper()
	got, out := runCLIWith(t, kubeconfig, args...)
	if got != code {
		t.Fatalf("cdplane %s: exit %d, want %d:\n%s", strings.Join(args, " "), got, code, out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("cdplane %s: output lacks %q:\n%s", strings.Join(args, " "), w, out)
		}
	}
	return out
}

// TestTransientAPIErrorsAreRetried: every administrator's command — install, apply and destroy
// of the prerequisites and a plane, assign and unassign of a namespace and a node — succeeds
// when the first two requests of every kind (verb and resource, Helm's and discovery's
// included) fail as an apiserver under load or restarting fails them: 503, 429, a 500 for an
// etcd leader change, a connection cut without an answer (creates meet only the first two).
// Each command says it retried.
func TestTransientAPIErrorsAreRetried(t *testing.T) {
	ctx := context.Background()
	cycle := []fault{unavailable, tooMany, leaderChanged, reset}
	// A create is sent again only after a failure that says the apiserver did not take it: after
	// a reset or a 500 it may have been applied, and a second create would fail or duplicate it
	// (TestPartialStateNamesTheFinishingCommand, "a create cut off").
	notTaken := []fault{unavailable, tooMany}
	next := 0
	p := newFaultProxy(t, func(kind string, n int) fault {
		if n >= 2 {
			return noFault
		}
		next++
		if strings.HasPrefix(kind, "POST ") {
			return notTaken[next%len(notTaken)]
		}
		return cycle[next%len(cycle)]
	})
	kubeconfig := p.kubeconfig(t)
	const id = "plane-r"
	leaveNothing(t, id)
	ns := testCluster.Namespace(t, nil)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "retried-node"}}
	must(t, testCluster.Client.Create(ctx, node))
	t.Cleanup(func() { _ = testCluster.Client.Delete(context.Background(), node) })

	retried := "retrying after: "
	for _, step := range [][]string{
		{"install", "prerequisites"},
		{"install", "plane", "--control-plane-id", id, "--set", "image.repository=" + testutil.TestImageRepository, "--wait=false"},
		{"assign", "namespace", ns, "--control-plane-id", id},
		{"assign", "node", node.Name, "--control-plane-id", id},
		{"apply", "plane", "--control-plane-id", id, "--wait=false", "--set", "logVerbosity=3"},
		{"unassign", "namespace", ns, "--control-plane-id", id},
		{"assign", "namespace", ns, "--control-plane-id", id},
		{"destroy", "plane", "--control-plane-id", id},
		{"destroy", "prerequisites"},
	} {
		p.forget()
		cliThrough(t, kubeconfig, 0, []string{retried}, step...)
	}

	// Every fault was met, by requests of every verb.
	for _, f := range cycle {
		if p.injectedCount(f) == 0 {
			t.Errorf("no request was failed with %s", f)
		}
	}
	kinds := strings.Join(p.injectedKinds(), "\n")
	for _, want := range []string{"GET secrets", "POST secrets", "PATCH deployments", "PATCH namespaces", "PATCH nodes", "POST rolebindings", "DELETE rolebindings", "DELETE namespaces", "DELETE customresourcedefinitions"} {
		if !strings.Contains(kinds, want) {
			t.Errorf("no %s request was failed; failed kinds:\n%s", want, kinds)
		}
	}
	// And the commands did their work: the plane and the prerequisites are gone, the namespace
	// and node carry no plane label, nothing of the plane is left.
	if left := labelled(t, id); len(left) > 0 {
		t.Errorf("objects carrying the %s label after destroy: %v", id, left)
	}
	if err := testCluster.Client.Get(ctx, client.ObjectKey{Name: "computedomains.resource.nvidia.com"}, &apiextensionsv1.CustomResourceDefinition{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ComputeDomain CRD after destroying the prerequisites: %v, want NotFound", err)
	}
	record, err := lifecycle.NodeAssignments(ctx, testCluster.Client)
	must(t, err)
	if _, ok := record[node.Name]; ok {
		t.Errorf("node %s is still recorded after its plane was destroyed: %v", node.Name, record)
	}
}

// TestPartialStateNamesTheFinishingCommand: a command whose step keeps failing stops within
// its --timeout, names what it did, what it did not, and the command that finishes; that
// command, run once the fault is gone, finishes. Steps: the RoleBindings of `assign namespace`
// after the label; the controller Deployment of `install plane` after the namespace and the
// release record (the same install then installs over the failed release); the namespace
// deletion of `destroy plane` after the release is uninstalled.
func TestPartialStateNamesTheFinishingCommand(t *testing.T) {
	ctx := context.Background()
	m, _ := newManager(t)
	const id = "plane-p"
	leaveNothing(t, id)
	must(t, m.InstallPrerequisites(ctx, nil))
	p := newFaultProxy(t, func(string, int) fault { return noFault })
	failOnly := func(kinds ...string) { p.setRule(func(kind string, _ int) fault { return pick(kind, kinds) }) }
	kubeconfig := p.kubeconfig(t)

	t.Run("install plane", func(t *testing.T) {
		failOnly("PATCH deployments", "POST deployments")
		cliThrough(t, kubeconfig, 1, []string{
			"retrying after: 503 Service Unavailable: injected",
			"done: created namespace plane-p-cdplane; Helm release plane-p-cdplane/plane-p-cdplane is at revision 1, failed",
			"not done: the Helm release's objects",
			"to finish, run: cdplane install plane --control-plane-id plane-p",
		}, "install", "plane", "--control-plane-id", id, "--set", "image.repository="+testutil.TestImageRepository, "--wait=false", "--timeout", "5s")
		failOnly()
		cliThrough(t, kubeconfig, 0, []string{"failed to install before (revision 1", `control plane "plane-p" is installed`},
			"install", "plane", "--control-plane-id", id, "--set", "image.repository="+testutil.TestImageRepository, "--wait=false")
		cliThrough(t, kubeconfig, 1, []string{"already installed"}, "install", "plane", "--control-plane-id", id, "--set", "image.repository="+testutil.TestImageRepository, "--wait=false")
	})

	t.Run("apply plane reports a node that lost its label", func(t *testing.T) {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "partial-node"}}
		must(t, testCluster.Client.Create(ctx, node))
		t.Cleanup(func() { _ = testCluster.Client.Delete(context.Background(), node) })
		cliThrough(t, kubeconfig, 0, nil, "assign", "node", node.Name, "--control-plane-id", id)
		reRegister(t, node.Name)
		cliThrough(t, kubeconfig, 0, []string{`Warning: node partial-node was assigned to control plane "plane-p" but its label is gone (re-registered?): run cdplane assign node partial-node --control-plane-id plane-p`},
			"apply", "plane", "--control-plane-id", id, "--wait=false")
	})

	ns := testCluster.Namespace(t, nil)
	t.Run("assign namespace", func(t *testing.T) {
		failOnly("POST rolebindings")
		cliThrough(t, kubeconfig, 1, []string{
			"retrying after: 503 Service Unavailable: injected",
			"done: label resource.nvidia.com/control-plane-id=plane-p set on namespace " + ns,
			"not done: the plane's RoleBindings in namespace " + ns,
			"to finish, run: cdplane assign namespace " + ns + " --control-plane-id plane-p",
		}, "assign", "namespace", ns, "--control-plane-id", id, "--timeout", "3s")
		failOnly()
		cliThrough(t, kubeconfig, 0, []string{"RoleBinding " + ns + "/plane-p-cdplane-controller created"},
			"assign", "namespace", ns, "--control-plane-id", id)
		rbs := &rbacv1.RoleBindingList{}
		must(t, testCluster.Client.List(ctx, rbs, client.InNamespace(ns)))
		if len(rbs.Items) != 2 {
			t.Fatalf("%d RoleBindings in %s after finishing, want 2", len(rbs.Items), ns)
		}
	})

	// A create whose connection is cut may have been applied: the transport does not send it
	// again; the command stops as for any failure, and the command it names finishes.
	t.Run("a create cut off", func(t *testing.T) {
		ns := testCluster.Namespace(t, nil)
		cut := false
		p.setRule(func(kind string, _ int) fault {
			if kind == "POST rolebindings" && !cut {
				cut = true
				return reset
			}
			return noFault
		})
		before := p.sent("POST rolebindings")
		out := cliThrough(t, kubeconfig, 1, []string{
			"not done: the plane's RoleBindings in namespace " + ns,
			"to finish, run: cdplane assign namespace " + ns + " --control-plane-id plane-p",
		}, "assign", "namespace", ns, "--control-plane-id", id, "--timeout", "3s")
		if n := p.sent("POST rolebindings") - before; n != 1 || strings.Contains(out, "retrying after") {
			t.Errorf("the create cut off was sent %d times (want once), output:\n%s", n, out)
		}
		failOnly()
		cliThrough(t, kubeconfig, 0, nil, "assign", "namespace", ns, "--control-plane-id", id)
		rbs := &rbacv1.RoleBindingList{}
		must(t, testCluster.Client.List(ctx, rbs, client.InNamespace(ns)))
		if len(rbs.Items) != 2 {
			t.Fatalf("%d RoleBindings in %s after finishing, want 2", len(rbs.Items), ns)
		}
	})

	t.Run("destroy plane", func(t *testing.T) {
		failOnly("DELETE namespaces")
		cliThrough(t, kubeconfig, 1, []string{
			"done: the plane's namespaces and nodes unassigned; Helm release plane-p-cdplane/plane-p-cdplane uninstalled",
			"not done: namespace plane-p-cdplane deleted",
			"to finish, run: cdplane destroy plane --control-plane-id plane-p",
		}, "destroy", "plane", "--control-plane-id", id, "--timeout", "5s")
		failOnly()
		cliThrough(t, kubeconfig, 0, []string{`control plane "plane-p" is destroyed`}, "destroy", "plane", "--control-plane-id", id)
		err := testCluster.Client.Get(ctx, client.ObjectKey{Name: "plane-p-cdplane"}, &corev1.Namespace{})
		if !apierrors.IsNotFound(err) {
			t.Fatalf("namespace plane-p-cdplane after destroy: %v", err)
		}
	})
}

func pick(kind string, kinds []string) fault {
	for _, k := range kinds {
		if kind == k {
			return unavailable
		}
	}
	return noFault
}

// leaveNothing destroys plane id and the prerequisites when the test ends, if they are still
// there (a failed test), so that the next test starts from a bare cluster.
func leaveNothing(t *testing.T, id string) {
	t.Cleanup(func() {
		ctx := context.Background()
		m, out := newManager(t)
		if err := m.DestroyPlane(ctx, id, true); err != nil && !strings.Contains(err.Error(), "is not installed") {
			t.Errorf("destroying %s after the test: %v\n%s", id, err, out)
		}
		if err := m.DestroyPrerequisites(ctx); err != nil && !strings.Contains(err.Error(), "are not installed") {
			t.Errorf("destroying the prerequisites after the test: %v\n%s", err, out)
		}
	})
}
