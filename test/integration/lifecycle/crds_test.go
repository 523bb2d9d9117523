package lifecycle

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/kube"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/lifecycle"
	"cdplane/internal/testutil"
)

// TestRawHelmUninstallKeepsTheCRDs: `helm uninstall` of the prerequisites release, run by hand,
// leaves the CRDs and so every ComputeDomain in place (Helm's resource-policy keep); `cdplane
// install prerequisites` takes the kept CRDs back into a release; `cdplane destroy prerequisites`
// is the one way to remove them, refused while a ComputeDomain exists.
func TestRawHelmUninstallKeepsTheCRDs(t *testing.T) {
	ctx := context.Background()
	m, out := lifecycleTest(t, "")
	must(t, m.InstallPrerequisites(ctx, nil))
	ns := testCluster.Namespace(t, nil)
	cd := testutil.MakeComputeDomain("kept").Namespace(ns).NumNodes(1).Obj()
	must(t, testCluster.Client.Create(ctx, cd))

	helmUninstall(t, lifecycle.PrerequisitesRelease, lifecycle.PrerequisitesNamespace)
	for _, name := range []string{"computedomains.resource.nvidia.com", "computedomaincliques.resource.nvidia.com"} {
		if err := testCluster.Client.Get(ctx, client.ObjectKey{Name: name}, &apiextensionsv1.CustomResourceDefinition{}); err != nil {
			t.Errorf("CRD %s after a raw helm uninstall: %v, want it kept", name, err)
		}
	}
	if err := testCluster.Client.Get(ctx, client.ObjectKeyFromObject(cd), &cdv1beta1.ComputeDomain{}); err != nil {
		t.Fatalf("the ComputeDomain after a raw helm uninstall: %v, want it kept", err)
	}

	// Installing again takes the kept CRDs back; the domain is untouched. Without Helm's
	// ownership annotations, as NVIDIA's chart leaves its CRDs (crds/, never owned by a
	// release), they are taken into the release too.
	for _, name := range []string{"computedomains.resource.nvidia.com", "computedomaincliques.resource.nvidia.com"} {
		patch := []byte(`{"metadata":{"annotations":{"meta.helm.sh/release-name":null,"meta.helm.sh/release-namespace":null},"labels":{"app.kubernetes.io/managed-by":null}}}`)
		crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name}}
		must(t, testCluster.Client.Patch(ctx, crd, client.RawPatch(types.MergePatchType, patch)))
	}
	must(t, m.InstallPrerequisites(ctx, nil))
	if !strings.Contains(out.String(), "Taking CRD computedomains.resource.nvidia.com, installed outside Helm") {
		t.Errorf("no word of taking the CRDs over:\n%s", out.String())
	}
	if err := testCluster.Client.Get(ctx, client.ObjectKeyFromObject(cd), &cdv1beta1.ComputeDomain{}); err != nil {
		t.Fatalf("the ComputeDomain after installing again: %v", err)
	}

	// The one way out refuses while a domain exists, also when the release is gone.
	helmUninstall(t, lifecycle.PrerequisitesRelease, lifecycle.PrerequisitesNamespace)
	mustNot(t, m.DestroyPrerequisites(ctx), "ComputeDomains still exist (e.g. "+ns+"/kept)")
	must(t, testCluster.Client.Delete(ctx, cd))
	must(t, m.DestroyPrerequisites(ctx))
	for _, name := range []string{"computedomains.resource.nvidia.com", "computedomaincliques.resource.nvidia.com"} {
		if err := testCluster.Client.Get(ctx, client.ObjectKey{Name: name}, &apiextensionsv1.CustomResourceDefinition{}); !apierrors.IsNotFound(err) {
			t.Errorf("CRD %s after destroy prerequisites: %v, want NotFound", name, err)
		}
	}
	mustNot(t, m.DestroyPrerequisites(ctx), "the prerequisites are not installed")
}

// helmUninstall uninstalls a release the way `helm uninstall` does, with the Helm SDK.
func helmUninstall(t *testing.T, name, namespace string) {
	t.Helper()
	kubeconfig, err := testCluster.AdminKubeconfig("helm")
	if err != nil {
		t.Fatal(err)
	}
	flags := genericclioptions.NewConfigFlags(true)
	flags.KubeConfig, flags.Namespace = &kubeconfig, &namespace
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(slog.DiscardHandler))
	if err := cfg.Init(flags, namespace, "secret"); err != nil {
		t.Fatal(err)
	}
	u := action.NewUninstall(cfg)
	u.WaitStrategy = kube.HookOnlyStrategy
	if _, err := u.Run(name); err != nil {
		t.Fatalf("helm uninstall %s/%s: %v", namespace, name, err)
	}
}
