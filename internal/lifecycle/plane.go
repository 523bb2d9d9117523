package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	charts "cdplane/deployments/helm"
	"cdplane/internal/plane"
)

const cdCRD = "computedomains.resource.nvidia.com"

// InstallPlane installs control plane id (empty: the legacy plane) with chart values.
func (m *Manager) InstallPlane(ctx context.Context, id string, values map[string]any) error {
	return m.deployPlane(ctx, id, values, false, ResetValues)
}

// ApplyPlane upgrades the installed control plane id to this CLI's chart and values: with
// KeepValues merged over the values the release holds, with ResetValues on the chart's defaults.
func (m *Manager) ApplyPlane(ctx context.Context, id string, values map[string]any, mode Values) error {
	return m.deployPlane(ctx, id, values, true, mode)
}

// RenderPlane checks, without reading a cluster, what installing or upgrading plane id with
// these chart values would write: the id is valid, a controlPlaneID value does not contradict
// it, the chart's schema admits the values, and every cluster-scoped object the chart renders
// carries the plane's canonical name (CheckCanonical). It returns the values, with
// controlPlaneID set, and the rendered manifests. Commands call it before they load a
// kubeconfig, so that a bad flag is reported as such.
func RenderPlane(id string, values map[string]any) (map[string]any, []charts.Manifest, error) {
	if err := plane.ValidateID(id); err != nil {
		return nil, nil, err
	}
	vals := maps.Clone(values)
	if vals == nil {
		vals = map[string]any{}
	}
	if v, ok := vals["controlPlaneID"]; ok && v != id {
		return nil, nil, fmt.Errorf("value controlPlaneID=%v contradicts --%s=%q", v, plane.FlagName, id)
	}
	vals["controlPlaneID"] = id
	release, ns := PlaneRelease(id)
	manifests, err := charts.Render(charts.Plane, release, ns, vals)
	if err != nil {
		return nil, nil, err
	}
	legacyVals := maps.Clone(vals)
	legacyVals["controlPlaneID"] = ""
	legacy, err := charts.Render(charts.Plane, plane.DriverNamespaceLegacyName, plane.DriverNamespaceLegacyName, legacyVals)
	if err != nil {
		return nil, nil, err
	}
	if err := CheckCanonical(id, manifests, legacy); err != nil {
		return nil, nil, err
	}
	return vals, manifests, nil
}

// CheckPlaneValues is RenderPlane for a command's flags, before it reads a cluster. For an apply
// that keeps the release's values (KeepValues) the image may be the release's: where values set
// none, a stand-in takes its place here, and the release's values merged with these are rendered
// for real before anything changes.
func CheckPlaneValues(id string, values map[string]any, mode Values) error {
	if mode == KeepValues {
		if img, _ := values["image"].(map[string]any); img["repository"] == nil {
			values = loader.MergeMaps(values, map[string]any{"image": map[string]any{"repository": "release-image"}})
		}
	}
	_, _, err := RenderPlane(id, values)
	return err
}

func (m *Manager) deployPlane(ctx context.Context, id string, values map[string]any, upgrade bool, mode Values) error {
	if !upgrade {
		mode = ResetValues // an install starts from the chart's defaults
	}
	if err := CheckPlaneValues(id, values, mode); err != nil {
		return err
	}
	release, ns := PlaneRelease(id)
	m.progress("Checking %s (Helm release %s in namespace %s)", describePlane(id), release, ns)

	if err := m.c.Get(ctx, client.ObjectKey{Name: cdCRD}, &apiextensionsv1.CustomResourceDefinition{}); apierrors.IsNotFound(err) {
		return errors.New("the prerequisites are not installed (no ComputeDomain CRD): run `cdplane install prerequisites` first")
	} else if err != nil {
		return fmt.Errorf("looking for the ComputeDomain CRD: %w", err)
	}
	if err := m.checkPlaneSkew(); err != nil {
		return err
	}
	rel, err := m.release(release, ns)
	if err != nil {
		return err
	}
	resume, deployed, err := m.releaseCheck(rel, release, ns)
	switch {
	case err != nil:
		return err
	case upgrade && rel == nil:
		return fmt.Errorf("%s is not installed: run `cdplane install plane` first", describePlane(id))
	case !upgrade && deployed:
		return fmt.Errorf("%s is already installed (release %s/%s, revision %d): use `cdplane apply plane` to upgrade it", describePlane(id), ns, release, rel.Version)
	}
	var relValues map[string]any
	if rel != nil {
		relValues = rel.Config
	}
	merged, kept := keptValues(mode, relValues, values)
	if len(kept) > 0 {
		m.progress("%s", describeKept(kept))
	}
	vals, manifests, err := RenderPlane(id, merged)
	if err != nil {
		if len(kept) > 0 {
			return fmt.Errorf("the release's values with this apply's: %w", err)
		}
		return err
	}
	if err := m.checkPlaneObjects(ctx, id, release, ns, manifests); err != nil {
		return err
	}

	// Checks passed: the first change. From here on, a failure names what is done and the
	// command that finishes the job.
	verb, cmd := "Installing", "install plane"
	if upgrade {
		verb, cmd = "Upgrading", "apply plane"
	}
	again := commandLine(cmd, id) + sameValues(values)
	var done []string
	partial := func(err error, notDone, finish string) error {
		if state := m.releaseState(release, ns); state != "" && !slices.Contains(done, state) {
			done = append(done, state)
		}
		if len(done) == 0 {
			return err
		}
		return &PartialError{Err: err, Done: done, NotDone: notDone, Finish: finish}
	}
	for _, name := range namespacesOf(ns, manifests) {
		created, err := m.ensureNamespace(ctx, id, name)
		if err != nil {
			return partial(err, "namespace "+name+" and the Helm release", again)
		}
		if created {
			done = append(done, "created namespace "+name)
		}
	}
	if resume {
		m.progress("Helm release %s/%s failed to install before (revision %d: %s): installing over it", ns, release, rel.Version, rel.Info.Description)
	}
	m.progress("%s Helm release %s/%s (chart %s)", verb, ns, release, charts.Plane)
	if err := m.installOrUpgrade(ctx, charts.Plane, release, ns, vals, upgrade || resume); err != nil {
		return partial(err, "the Helm release's objects, as the chart renders them", again)
	}
	if m.opts.Wait {
		if err := m.waitPlaneReady(ctx, id, ns); err != nil {
			return partial(err, "the controller and the kubelet plugin ready", commandLine("apply plane", id)+sameValues(values)+" (it upgrades to the same chart and waits again)")
		}
	}
	m.progress("%s is %s", describePlane(id), map[bool]string{false: "installed", true: "upgraded"}[upgrade])
	m.reportNodes(ctx, id)
	return nil
}

// reportNodes prints a warning for each recorded node of plane id that lost its label (see
// CheckNodeAssignments); the plane's kubelet plugin does not run there until it is assigned
// again.
func (m *Manager) reportNodes(ctx context.Context, id string) {
	if id == "" {
		return
	}
	findings, _, err := NodeAssignmentReport(ctx, m.c, id)
	if err != nil {
		m.progress("Warning: could not check the plane's recorded node assignments: %v", err)
		return
	}
	for _, f := range findings {
		if !f.Absent {
			m.progress("Warning: %s", f.Message)
		}
	}
}

// checkPlaneObjects checks, before any change, every namespace the plane will use and every
// cluster-scoped object it will write (the manifests RenderPlane returned).
func (m *Manager) checkPlaneObjects(ctx context.Context, id, release, ns string, manifests []charts.Manifest) error {
	if err := m.checkKinds(manifests); err != nil {
		return err
	}
	for _, name := range namespacesOf(ns, manifests) {
		cur, err := m.getNamespace(ctx, name)
		if err != nil {
			return err
		}
		if err := CheckNamespace(id, name, nsObject(cur)); err != nil {
			return err
		}
	}
	for _, mf := range manifests {
		if mf.Object.GetNamespace() != "" {
			continue
		}
		cur, err := m.current(ctx, mf.Object)
		if err != nil {
			return err
		}
		if cur == nil {
			continue
		}
		if err := CheckClusterScoped(release, ns, mf.Object.GetKind(), cur); err != nil {
			return err
		}
	}
	return nil
}

// checkKinds refuses, before any change, manifests of kinds the cluster does not serve: the
// Prometheus operator's PodMonitor and PrometheusRule (the monitoring values) in a cluster
// without its CRDs. Helm would otherwise fail at those objects after the plane's namespaces
// were made, leaving a release half installed.
func (m *Manager) checkKinds(manifests []charts.Manifest) error {
	var missing []string
	prometheus := false
	seen := map[schema.GroupVersionKind]bool{}
	for _, mf := range manifests {
		gvk := mf.Object.GroupVersionKind()
		if seen[gvk] {
			continue
		}
		seen[gvk] = true
		_, err := m.c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
		switch {
		case meta.IsNoMatchError(err):
			missing = append(missing, fmt.Sprintf("%s (%s, %s)", gvk.Kind, gvk.GroupVersion(), mf.Template))
			prometheus = prometheus || gvk.Group == prometheusGroup
		case err != nil:
			return fmt.Errorf("looking up %s in the cluster's APIs: %w", gvk, err)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	msg := "the cluster does not serve " + strings.Join(missing, ", ") + ", which the chart renders with these values"
	if prometheus {
		msg += ": install the Prometheus operator's CRDs (monitoring.coreos.com) first, or leave monitoring.podMonitor.enabled and monitoring.prometheusRule.enabled off"
	}
	return errors.New(msg + "; nothing was changed")
}

// prometheusGroup is the API group of the Prometheus operator's PodMonitor and PrometheusRule.
const prometheusGroup = "monitoring.coreos.com"

// namespacesOf returns the driver namespace and every other namespace the manifests use.
func namespacesOf(driverNS string, manifests []charts.Manifest) []string {
	out := []string{driverNS}
	seen := map[string]bool{driverNS: true}
	for _, mf := range manifests {
		if ns := mf.Object.GetNamespace(); ns != "" && !seen[ns] {
			seen[ns] = true
			out = append(out, ns)
		}
	}
	return out
}

func (m *Manager) getNamespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	ns := &corev1.Namespace{}
	err := m.c.Get(ctx, client.ObjectKey{Name: name}, ns)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading namespace %s: %w", name, err)
	}
	return ns, nil
}

// ensureNamespace creates a namespace for the plane, labelled for it, unless it exists (then
// it was checked already). It says whether it created it.
func (m *Manager) ensureNamespace(ctx context.Context, id, name string) (bool, error) {
	labels := map[string]string{partOfLabel: partOfValue, "app.kubernetes.io/managed-by": "cdplane"}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: plane.Stamp(id, labels)}}
	err := m.c.Create(ctx, ns)
	if apierrors.IsAlreadyExists(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("creating namespace %s: %w", name, err)
	}
	m.progress("Created namespace %s", name)
	return true, nil
}

// sameValues reminds, in a command to run again, to pass the same chart values.
func sameValues(values map[string]any) string {
	if len(values) == 0 {
		return ""
	}
	return " with the same --values/--set"
}

// nsObject returns ns as a metav1.Object, nil when ns is nil.
func nsObject(ns *corev1.Namespace) metav1.Object {
	if ns == nil {
		return nil
	}
	return ns
}

// current reads the object as it is in the cluster (nil when absent), by the kind, namespace and
// name of obj.
func (m *Manager) current(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(obj.GroupVersionKind())
	err := m.c.Get(ctx, client.ObjectKeyFromObject(obj), cur)
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		// Absent, or of a kind this apiserver does not serve (MutatingAdmissionPolicy v1 before
		// Kubernetes 1.36, which the chart then does not render): nothing of it exists.
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return cur, nil
}
