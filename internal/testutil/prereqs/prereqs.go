// Package prereqs installs the shared prerequisites chart's objects into a test cluster the way
// `helm install` would create them (minus the CRDs, which the test environment installs).
package prereqs

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	charts "cdplane/deployments/helm"
)

// Create renders the cdplane-prerequisites chart with its default values and creates every
// object but the CRDs; objects that already exist are left as they are. Templates limits it to
// those templates (file names such as "ownership-policies.yaml"); none means all.
func Create(ctx context.Context, c client.Client, templates ...string) error {
	ms, err := charts.Render(charts.Prerequisites, charts.Prerequisites, "kube-system", nil)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, t := range templates {
		want[charts.Prerequisites+"/templates/"+t] = true
	}
	for _, m := range ms {
		if m.Object.GetKind() == "CustomResourceDefinition" || (len(want) > 0 && !want[m.Template]) {
			continue
		}
		if err := c.Create(ctx, m.Object); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: creating %s %s: %w", m.Template, m.Object.GetKind(), m.Object.GetName(), err)
		}
	}
	return nil
}
