package planes

import (
	"strings"
	"sync"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/plane"
	"cdplane/internal/testutil/prereqs"
)

var statusPolicyOnce sync.Once

// statusWriterRole grants writing ComputeDomains' status, so that only admission stands in the
// way: what a tenant given a wildcard role on the group would hold.
var statusWriterRole = &rbacv1.ClusterRole{
	ObjectMeta: metav1.ObjectMeta{Name: "planes-test-status-writer"},
	Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{cdv1beta1.GroupVersion.Group},
		Resources: []string{"computedomains/status"},
		Verbs:     []string{"update", "patch"},
	}},
}

// TestOnlyTheDomainsControllerWritesItsStatus: with the cliques gate off, daemons read their
// peers from a domain's status, so a forged status.nodes points them at the writer. Whatever
// RBAC grants, only the controller of the domain's own plane and administrators write it: not a
// tenant with a wildcard role, not another plane's controller, not the legacy plane's on a
// labelled domain, not a look-alike account.
func TestOnlyTheDomainsControllerWritesItsStatus(t *testing.T) {
	t.Parallel()
	installPolicies(t)
	var err error
	statusPolicyOnce.Do(func() {
		err = prereqs.Create(testContext(t), testCluster.Client, "status-writers-policy.yaml")
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	const id = "stat"
	own := createDomain(t, testCluster.Client, assignedNamespace(t, id), "cd")
	foreign := createDomain(t, testCluster.Client, assignedNamespace(t, planeB), "cd")
	legacy := createDomain(t, testCluster.Client, testCluster.Namespace(t, nil), "cd")

	writer := func(u *identity, err error) client.Client {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if err := u.bindClusterRole(ctx, statusWriterRole); err != nil {
			t.Fatal(err)
		}
		return u.c
	}
	planeCtl := writer(serviceAccountIdentity(ctx, plane.Name(id, plane.DriverNamespaceLegacyName), plane.Name(id, "cdplane-controller"), nil))
	legacyCtl := writer(serviceAccountIdentity(ctx, plane.DriverNamespaceLegacyName, "cdplane-controller", nil))
	lookAlike := writer(serviceAccountIdentity(ctx, testCluster.Namespace(t, nil), plane.Name(id, "cdplane-controller"), nil))
	tenantUser := writer(newIdentity(ctx, "planes-test-wildcard-tenant", nil))

	write := func(c client.Client, cd *cdv1beta1.ComputeDomain) error {
		return c.Status().Patch(ctx, cd.DeepCopy(), client.RawPatch(types.MergePatchType,
			[]byte(`{"status":{"status":"Ready","nodes":[{"name":"evil","ipAddress":"127.0.0.66","cliqueID":"x.1","index":0,"status":"Ready"}]}}`)),
			client.DryRunAll)
	}
	eventuallyRefused(t, "a tenant writing a domain's status", func() error { return write(tenantUser, own) })
	for what, tc := range map[string]struct {
		c  client.Client
		cd *cdv1beta1.ComputeDomain
		ok bool
	}{
		"its plane's controller":                  {c: planeCtl, cd: own, ok: true},
		"the legacy controller, unlabelled":       {c: legacyCtl, cd: legacy, ok: true},
		"an administrator":                        {c: testCluster.Client, cd: own, ok: true},
		"a tenant with a wildcard role":           {c: tenantUser, cd: legacy},
		"another plane's controller":              {c: planeCtl, cd: foreign},
		"a named plane's controller on a legacy":  {c: planeCtl, cd: legacy},
		"the legacy controller on a labelled one": {c: legacyCtl, cd: own},
		"a look-alike of the plane's controller":  {c: lookAlike, cd: own},
	} {
		err := write(tc.c, tc.cd)
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v, want admitted", what, err)
		case !tc.ok && !isAdmissionRefusal(err):
			t.Errorf("%s: %v, want an admission refusal", what, err)
		case !tc.ok && !strings.Contains(err.Error(), "is written only by the controller of its control plane") &&
			// The legacy plane's own scope policy, where another test installed it, says so too.
			(tc.c != legacyCtl || !strings.Contains(err.Error(), "cdplane-controller-scope")):
			t.Errorf("%s: %v, want the status-writers policy's refusal", what, err)
		}
	}
}
