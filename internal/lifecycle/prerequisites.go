package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	charts "cdplane/deployments/helm"
	"cdplane/internal/refusal"
)

// InstallPrerequisites installs the shared prerequisites release and waits until the API is
// served and the admission policies admit ComputeDomains.
func (m *Manager) InstallPrerequisites(ctx context.Context, values map[string]any) error {
	return m.deployPrerequisites(ctx, values, false, ResetValues)
}

// ApplyPrerequisites upgrades the prerequisites release to this CLI's chart and values: with
// KeepValues merged over the values the release holds, with ResetValues on the chart's defaults.
func (m *Manager) ApplyPrerequisites(ctx context.Context, values map[string]any, mode Values) error {
	return m.deployPrerequisites(ctx, values, true, mode)
}

// RenderPrerequisites renders the prerequisites chart with these values without reading a
// cluster; an error names the values its schema refuses. Commands call it before they load a
// kubeconfig.
func RenderPrerequisites(values map[string]any) ([]charts.Manifest, error) {
	return charts.Render(charts.Prerequisites, PrerequisitesRelease, PrerequisitesNamespace, values)
}

func (m *Manager) deployPrerequisites(ctx context.Context, values map[string]any, upgrade bool, mode Values) error {
	manifests, err := RenderPrerequisites(values)
	if err != nil {
		return err
	}
	m.progress("Checking the prerequisites (Helm release %s in namespace %s)", PrerequisitesRelease, PrerequisitesNamespace)
	rel, err := m.release(PrerequisitesRelease, PrerequisitesNamespace)
	if err != nil {
		return err
	}
	var adopt []string
	resume, deployed, err := m.releaseCheck(rel, PrerequisitesRelease, PrerequisitesNamespace)
	switch {
	case err != nil:
		return err
	case upgrade && rel == nil:
		return errors.New("the prerequisites are not installed: run `cdplane install prerequisites` first")
	case !upgrade && deployed:
		return fmt.Errorf("the prerequisites are already installed (release %s/%s, revision %d): use `cdplane apply prerequisites` to upgrade them", PrerequisitesNamespace, PrerequisitesRelease, rel.Version)
	}
	given := values
	if upgrade {
		var kept []string
		values, kept = keptValues(mode, rel.Config, values)
		if len(kept) > 0 {
			m.progress("%s", describeKept(kept))
		}
		if manifests, err = RenderPrerequisites(values); err != nil {
			return fmt.Errorf("the release's values with this apply's: %w", err)
		}
	}
	for _, mf := range manifests {
		cur, err := m.current(ctx, mf.Object)
		if err != nil {
			return err
		}
		if cur == nil {
			continue
		}
		if adoptable(mf.Object.GetKind(), cur) {
			adopt = append(adopt, cur.GetName())
			continue
		}
		if err := CheckClusterScoped(PrerequisitesRelease, PrerequisitesNamespace, mf.Object.GetKind(), cur); err != nil {
			return err
		}
	}
	// CRDs installed outside Helm (NVIDIA's chart ships them in crds/, which Helm never owns)
	// become the release's: their ComputeDomains stay, and the release upgrades them.
	for _, name := range adopt {
		m.progress("Taking CRD %s, installed outside Helm (e.g. by NVIDIA's chart), into release %s/%s; its ComputeDomains are kept", name, PrerequisitesNamespace, PrerequisitesRelease)
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{"app.kubernetes.io/managed-by":"Helm"},"annotations":{%q:%q,%q:%q}}}`,
			releaseNameAnnotation, PrerequisitesRelease, releaseNamespaceAnnotation, PrerequisitesNamespace)
		crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := m.c.Patch(ctx, crd, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return fmt.Errorf("taking CRD %s into the release: %w", name, err)
		}
	}
	verb, cmd := "Installing", "cdplane install prerequisites"
	if upgrade {
		verb, cmd = "Upgrading", "cdplane apply prerequisites"
	}
	partial := func(err error, notDone, finish string) error {
		state := m.releaseState(PrerequisitesRelease, PrerequisitesNamespace)
		if state == "" {
			return err
		}
		return &PartialError{Err: err, Done: []string{state}, NotDone: notDone, Finish: finish + sameValues(given)}
	}
	if resume {
		m.progress("Helm release %s/%s failed to install before (revision %d: %s): installing over it", PrerequisitesNamespace, PrerequisitesRelease, rel.Version, rel.Info.Description)
	}
	m.progress("%s Helm release %s/%s (chart %s)", verb, PrerequisitesNamespace, PrerequisitesRelease, charts.Prerequisites)
	if err := m.installOrUpgrade(ctx, charts.Prerequisites, PrerequisitesRelease, PrerequisitesNamespace, values, upgrade || resume); err != nil {
		return partial(err, "the release's objects, as the chart renders them", cmd)
	}
	if err := m.waitPrerequisitesServed(ctx); err != nil {
		return partial(err, "the ComputeDomain API served and admitted", "cdplane apply prerequisites")
	}
	m.progress("The prerequisites are %s", map[bool]string{false: "installed", true: "upgraded"}[upgrade])
	return nil
}

// waitPrerequisitesServed waits until the CRDs are established and a dry-run ComputeDomain
// create is admitted: the apiserver refuses ComputeDomain writes for a few seconds after the
// mutating admission policy or the CRD appears, while it refreshes the schema it checks
// against.
func (m *Manager) waitPrerequisitesServed(ctx context.Context) error {
	return m.waitFor(ctx, "the ComputeDomain API and its admission policies to be served", func(ctx context.Context) (bool, string, error) {
		for _, name := range crdNames {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := m.c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
				return false, "", err
			}
			established := false
			for _, c := range crd.Status.Conditions {
				established = established || (c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue)
			}
			if !established {
				return false, "CRD " + name + " not established yet", nil
			}
		}
		probe := &cdv1beta1.ComputeDomain{Spec: cdv1beta1.ComputeDomainSpec{Channel: &cdv1beta1.ComputeDomainChannelSpec{
			ResourceClaimTemplate: cdv1beta1.ComputeDomainResourceClaimTemplate{Name: "cdplane-admission-probe"},
		}}}
		probe.Name, probe.Namespace = "cdplane-admission-probe", "default"
		err := client.NewDryRunClient(m.c).Create(ctx, probe)
		if err == nil || apierrors.IsAlreadyExists(err) {
			return true, "", nil
		}
		if apierrors.IsServiceUnavailable(err) || apierrors.IsNotFound(err) || strings.Contains(err.Error(), "no matches for kind") {
			return false, "admission not ready: " + err.Error(), nil
		}
		return false, "", err
	})
}

// crdNames are the prerequisites' CRDs.
var crdNames = []string{cdCRD, "computedomaincliques.resource.nvidia.com"}

// DestroyPrerequisites uninstalls the prerequisites and deletes their CRDs, which Helm keeps.
// Refused while any control plane is installed or any ComputeDomain exists, or while that
// cannot be told (removing the CRDs would delete the domains).
func (m *Manager) DestroyPrerequisites(ctx context.Context) error {
	m.progress("Checking that no control plane is left")
	planes, err := m.releasesOfChart(charts.Plane)
	if err != nil {
		return err
	}
	if len(planes) > 0 {
		names := make([]string, 0, len(planes))
		for _, r := range planes {
			id := ""
			if v, ok := r.Config["controlPlaneID"].(string); ok {
				id = v
			}
			names = append(names, fmt.Sprintf("%s (release %s/%s)", describePlane(id), r.Namespace, r.Name))
		}
		return refusal.Errorf("control planes are still installed: %s; destroy them first (`cdplane destroy plane`); nothing was changed", strings.Join(names, ", "))
	}
	if err := noDomainsLeft(ctx, m.c); err != nil {
		return err
	}
	rel, err := m.release(PrerequisitesRelease, PrerequisitesNamespace)
	if err != nil {
		return err
	}
	if rel != nil {
		m.progress("Uninstalling Helm release %s/%s", PrerequisitesNamespace, PrerequisitesRelease)
		if err := m.uninstall(PrerequisitesRelease, PrerequisitesNamespace); err != nil {
			if state := m.releaseState(PrerequisitesRelease, PrerequisitesNamespace); state != "" {
				return &PartialError{Err: err, Done: []string{state}, NotDone: "removing the release's objects", Finish: "cdplane destroy prerequisites"}
			}
			return err
		}
	}
	// Helm keeps the CRDs (helm.sh/resource-policy: keep), so that a raw `helm uninstall` never
	// deletes every ComputeDomain: they go here, and only here, after the checks above. Also
	// when an earlier `helm uninstall` left them without a release.
	found := false
	for _, name := range crdNames {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := m.c.Get(ctx, client.ObjectKey{Name: name}, crd); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return fmt.Errorf("looking for CRD %s: %w", name, err)
		}
		found = true
		if crd.DeletionTimestamp != nil {
			continue // an earlier destroy deleted it; wait for it below
		}
		m.progress("Deleting CRD %s", name)
		if err := m.c.Delete(ctx, crd); client.IgnoreNotFound(err) != nil {
			done := []string{}
			if rel != nil {
				done = append(done, "Helm release "+PrerequisitesNamespace+"/"+PrerequisitesRelease+" uninstalled")
			}
			return &PartialError{Err: fmt.Errorf("deleting CRD %s: %w", name, err), Done: done, NotDone: "the CRDs gone", Finish: "cdplane destroy prerequisites"}
		}
	}
	if rel == nil && !found {
		return errors.New("the prerequisites are not installed")
	}
	if err := m.waitFor(ctx, "the CRDs to be gone", func(ctx context.Context) (bool, string, error) {
		for _, name := range crdNames {
			err := m.c.Get(ctx, client.ObjectKey{Name: name}, &apiextensionsv1.CustomResourceDefinition{})
			if apierrors.IsNotFound(err) {
				continue
			}
			return false, name + " terminating", err
		}
		return true, "", nil
	}); err != nil {
		return &PartialError{Err: err, Done: []string{"Helm release " + PrerequisitesNamespace + "/" + PrerequisitesRelease + " uninstalled, CRDs deleted"},
			NotDone: "the CRDs gone", Finish: "cdplane destroy prerequisites"}
	}
	m.progress("The prerequisites are destroyed")
	return nil
}

// noDomainsLeft returns nil only when it is known that no ComputeDomain exists: none is listed,
// or the API does not serve the kind at all. Any other error is a refusal, never a pass: removing
// the CRDs would delete every domain of every plane.
func noDomainsLeft(ctx context.Context, c client.Reader) error {
	cds := &cdv1beta1.ComputeDomainList{}
	err := c.List(ctx, cds, client.Limit(5))
	switch {
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("cannot tell whether ComputeDomains still exist (%w); refusing to remove the CRDs, which would delete them; nothing was changed", err)
	case len(cds.Items) > 0:
		return refusal.Errorf("ComputeDomains still exist (e.g. %s/%s): removing the CRDs would delete them; nothing was changed", cds.Items[0].Namespace, cds.Items[0].Name)
	}
	return nil
}

// adoptable reports whether an existing object the prerequisites chart renders is one of its
// CRDs installed outside Helm (no release annotations): the release takes it over rather than
// refusing, since deleting and recreating a CRD would delete every ComputeDomain.
func adoptable(kind string, cur metav1.Object) bool {
	if kind != "CustomResourceDefinition" || !slices.Contains(crdNames, cur.GetName()) {
		return false
	}
	a := cur.GetAnnotations()
	return a[releaseNameAnnotation] == "" && a[releaseNamespaceAnnotation] == ""
}
