// Package prereqs installs the shared prerequisites chart's objects into a test cluster the way
// `helm install` would create them (minus the CRDs, which the test environment installs).
package prereqs

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	charts "cdplane/deployments/helm"
)

// Create renders the cdplane-prerequisites chart with its default values and creates every
// object but the CRDs; objects that already exist are left as they are. Templates limits it to
// those templates (file names such as "ownership-policies.yaml"); none means all.
func Create(ctx context.Context, c client.Client, templates ...string) error {
	return install(ctx, c, nil, false, templates)
}

// Apply renders the chart with values and creates or replaces every object of templates, as
// `cdplane apply prerequisites --set ...` would.
func Apply(ctx context.Context, c client.Client, values map[string]any, templates ...string) error {
	return install(ctx, c, values, true, templates)
}

func install(ctx context.Context, c client.Client, values map[string]any, replace bool, templates []string) error {
	ms, err := charts.Render(charts.Prerequisites, charts.Prerequisites, "kube-system", values)
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
		// What Helm leaves out when the cluster does not serve a kind (the chart asks
		// .Capabilities): MutatingAdmissionPolicy before Kubernetes 1.36.
		if _, err := c.RESTMapper().RESTMapping(m.Object.GroupVersionKind().GroupKind(), m.Object.GroupVersionKind().Version); meta.IsNoMatchError(err) {
			continue
		}
		err := c.Create(ctx, m.Object.DeepCopy())
		if apierrors.IsAlreadyExists(err) && replace {
			cur := m.Object.DeepCopy()
			if err = c.Get(ctx, client.ObjectKeyFromObject(cur), cur); err == nil {
				obj := m.Object.DeepCopy()
				obj.SetResourceVersion(cur.GetResourceVersion())
				err = c.Update(ctx, obj)
			}
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: writing %s %s: %w", m.Template, m.Object.GetKind(), m.Object.GetName(), err)
		}
	}
	return nil
}
