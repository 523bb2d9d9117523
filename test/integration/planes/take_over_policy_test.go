package planes

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
)

// TestTakeOverTouchesOnlyNVIDIAsDomainObjects: a plane taking over from NVIDIA's driver holds a
// Role that may delete any DaemonSet, claim template or clique in NVIDIA's namespace. A leaked
// controller token may still remove only what NVIDIA's driver created for a ComputeDomain
// (labelled with a domain UID, not cdplane's own), and update those only to take finalizers away:
// NVIDIA's GPU plugin DaemonSet next to them is out of reach.
func TestTakeOverTouchesOnlyNVIDIAsDomainObjects(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	const id = "tko"
	nvidiaNS := testCluster.Namespace(t, nil)
	driverNS := applyPlaneRights(t, id, map[string]any{"takeOver": map[string]any{"fromNamespace": nvidiaNS}},
		"rbac-controller.yaml", "policy-take-over.yaml")
	const uid = "3c6e1f0a-9b2d-4e57-8a14-6f0d2c9b7e31"
	domainDS := testutil.MakeDaemonSet(cdv1beta1.DaemonSetName(uid), nvidiaNS).Selector("app", "imex").
		Label(cdv1beta1.ComputeDomainLabel, uid).Image("nvcr.io/nvidia/k8s-dra-driver-gpu:v25").Obj()
	domainDS.Finalizers = []string{cdv1beta1.Finalizer}
	gpuPlugin := testutil.MakeDaemonSet("nvidia-dra-driver-gpu-kubelet-plugin", nvidiaNS).Selector("app", "gpu").
		Image("nvcr.io/nvidia/k8s-dra-driver-gpu:v25").Obj()
	for _, ds := range []*appsv1.DaemonSet{domainDS, gpuPlugin} {
		if err := testCluster.Client.Create(ctx, ds); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = testCluster.Client.Patch(ctx, domainDS, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	u, err := serviceAccountIdentity(ctx, driverNS, plane.Name(id, "cdplane-controller"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctl := u.c
	remove := func(ds *appsv1.DaemonSet) error { return ctl.Delete(ctx, ds.DeepCopy(), client.DryRunAll) }
	patch := func(ds *appsv1.DaemonSet, body string) error {
		return ctl.Patch(ctx, ds.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(body)), client.DryRunAll)
	}
	eventuallyRefused(t, "deleting NVIDIA's GPU plugin DaemonSet with the controller's token", func() error { return remove(gpuPlugin) })
	for what, tc := range map[string]struct {
		attack func() error
		want   string // "" admitted
	}{
		"unfinalizing a domain's DaemonSet":  {attack: func() error { return patch(domainDS, `{"metadata":{"finalizers":null}}`) }},
		"deleting a domain's DaemonSet":      {attack: func() error { return remove(domainDS) }},
		"deleting the GPU plugin DaemonSet":  {attack: func() error { return remove(gpuPlugin) }, want: "only remove what NVIDIA's driver created for a ComputeDomain"},
		"unfinalizing the GPU plugin":        {attack: func() error { return patch(gpuPlugin, `{"metadata":{"finalizers":null}}`) }, want: "only remove what NVIDIA's driver created"},
		"changing a domain DaemonSet's spec": {attack: func() error { return patch(domainDS, `{"spec":{"template":{"spec":{"hostNetwork":true}}}}`) }, want: "may only remove finalizers"},
		"relabelling a domain's DaemonSet":   {attack: func() error { return patch(domainDS, `{"metadata":{"labels":{"evil":"yes"}}}`) }, want: "may only remove finalizers"},
	} {
		err := tc.attack()
		checkAdmission(t, what, err, tc.want)
	}
}
