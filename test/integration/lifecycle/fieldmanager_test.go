package lifecycle

import (
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"cdplane/internal/lifecycle"
)

// TestApplyTakesBackFieldsOfAnotherManager: the release's objects are written by field manager
// "cdplane" whatever the program running the library is called (this test binary here), and an
// apply takes back a field another manager set since — as a `helm upgrade` by hand or a CLI of
// another name does — instead of failing on the conflict, which is what an upgrade by an older
// CLI hit on every object of the release.
// statusWritersPolicy is one of the prerequisites' objects that carries the chart label.
const statusWritersPolicy = "compute-domain-status-writers.nvidia.com"

func TestApplyTakesBackFieldsOfAnotherManager(t *testing.T) {
	ctx := context.Background()
	m, _ := lifecycleTest(t, "")
	must(t, m.InstallPrerequisites(ctx, nil))

	dc := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	must(t, testCluster.Client.Get(ctx, client.ObjectKey{Name: statusWritersPolicy}, dc))
	managers := map[string]bool{}
	for _, f := range dc.ManagedFields {
		managers[f.Manager] = true
	}
	if !managers[lifecycle.FieldManager] || len(managers) != 1 {
		t.Errorf("policy %s is managed by %v, want %q alone", dc.Name, managers, lifecycle.FieldManager)
	}
	want := dc.Labels["helm.sh/chart"]
	if want == "" {
		t.Fatalf("policy %s has no chart label: the test changes nothing", dc.Name)
	}

	// Another manager sets one of the release's labels, as an upgrade by another program would.
	other := &unstructured.Unstructured{}
	other.SetAPIVersion("admissionregistration.k8s.io/v1")
	other.SetKind("ValidatingAdmissionPolicy")
	other.SetName(dc.Name)
	other.SetLabels(map[string]string{"helm.sh/chart": "cdplane-prerequisites-0.0.1"})
	must(t, testCluster.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(other), client.FieldOwner("helm"), client.ForceOwnership))

	must(t, m.ApplyPrerequisites(ctx, nil, lifecycle.KeepValues))
	must(t, testCluster.Client.Get(ctx, client.ObjectKey{Name: dc.Name}, dc))
	if got := dc.Labels["helm.sh/chart"]; got != want {
		t.Errorf("after the apply, policy %s's chart label is %q, want %q taken back", dc.Name, got, want)
	}
}
