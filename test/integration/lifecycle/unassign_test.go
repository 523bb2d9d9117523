package lifecycle

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/testutil"
)

// namespaceState is what an unassign changes in a namespace: its labels and RoleBindings.
func namespaceState(t *testing.T, ns string) map[string]string {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Namespace{}
	must(t, testCluster.Client.Get(ctx, client.ObjectKey{Name: ns}, n))
	out := map[string]string{"namespace": n.ResourceVersion, "label": n.Labels[cdv1beta1.ControlPlaneLabel]}
	rbs := &rbacv1.RoleBindingList{}
	must(t, testCluster.Client.List(ctx, rbs, client.InNamespace(ns)))
	for _, rb := range rbs.Items {
		out["RoleBinding "+rb.Name] = rb.ResourceVersion
	}
	return out
}

// createClaim creates a ResourceClaim in ns and writes its status as the scheduler and the
// kubelet would: allocated a device of driver, reserved for pod if it is not empty.
func createClaim(t *testing.T, ns, name, driver, pod string) *resourcev1.ResourceClaim {
	t.Helper()
	ctx := context.Background()
	w := testutil.MakeResourceClaim(name, ns).Request("channel", "compute-domain-default-channel.nvidia.com")
	claim := w.Obj()
	must(t, testCluster.Client.Create(ctx, claim))
	w.ResourceClaim = *claim
	w.Device("channel", driver, "node-1", "channel-0")
	if pod != "" {
		w.ReservedFor(pod, "00000000-0000-0000-0000-0000000000aa")
	}
	claim = w.Obj()
	must(t, testCluster.Client.Status().Update(ctx, claim))
	return claim
}

// TestForcedUnassignRefusedWhileClaimsPrepared: `cdplane unassign namespace --force` bypasses
// the live-ComputeDomain check, not this one: while the namespace holds ResourceClaims that
// compute-domain.nvidia.com allocated and pods use (status.reservedFor), the unassign is
// refused, naming them, and nothing changes (the plane's controller and daemons would lose their
// rights there while its domains still wait for those claims to be released). Claims of other
// drivers and claims no pod uses do not block; once the pod is gone, the forced unassign goes
// through.
func TestForcedUnassignRefusedWhileClaimsPrepared(t *testing.T) {
	ctx := context.Background()
	ns := testCluster.Namespace(t, nil)
	cliSays(t, 0, []string{`assigned to control plane "plane-f"`}, "assign", "namespace", ns, "--control-plane-id", "plane-f")

	inUse := createClaim(t, ns, "in-use", cdv1beta1.DriverName, "worker-0")
	createClaim(t, ns, "idle", cdv1beta1.DriverName, "")
	createClaim(t, ns, "other-driver", "gpu.example.com", "worker-1")

	before := namespaceState(t, ns)
	for _, force := range []bool{true, false} {
		args := []string{"unassign", "namespace", ns, "--control-plane-id", "plane-f"}
		if force {
			args = append(args, "--force")
		}
		out := cliSays(t, 3, []string{"refused", ns + "/in-use (reserved for pods/worker-0)"}, args...)
		for _, not := range []string{"idle", "other-driver"} {
			if strings.Contains(out, ns+"/"+not) {
				t.Errorf("the refusal names claim %s, which does not block:\n%s", not, out)
			}
		}
		if diff := cmp.Diff(before, namespaceState(t, ns)); diff != "" {
			t.Fatalf("a refused unassign (force %v) changed the namespace (-before +after):\n%s", force, diff)
		}
	}

	// The pod is gone: the kubelet unprepared the claim and its reservation went.
	inUse.Status.ReservedFor = nil
	must(t, testCluster.Client.Status().Update(ctx, inUse))
	cliSays(t, 0, []string{`unassigned from control plane "plane-f"`}, "unassign", "namespace", ns, "--control-plane-id", "plane-f", "--force")
	if got := namespaceState(t, ns); got["label"] != "" || len(got) != 2 {
		t.Fatalf("after the unassign: %v, want no label and no RoleBindings", got)
	}
}
