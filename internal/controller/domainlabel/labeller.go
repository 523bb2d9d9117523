// Package domainlabel gives a ComputeDomain its namespace's control-plane label where the
// apiserver cannot: Kubernetes before 1.36 serves no MutatingAdmissionPolicy v1, so the policy
// that stamps the label at admission is not installed there, and a domain created without the
// label would stay outside every plane's label-scoped cache.
//
// A plane with an id runs a Labeller: a metadata-only watch of the ComputeDomains that carry no
// plane label (nobody's yet: the selector is the label's absence, so the watch is as
// label-scoped as every other cache of the plane and never holds another plane's domains), and
// for each one whose namespace is assigned to this plane, read fresh, a patch that sets the label
// to the plane's id, conditional on the domain's resourceVersion. That is exactly what the
// admission policy would have written; the prerequisites' validating policy admits it (the
// label equals the namespace's), and the plane's policy lets its controller make this one
// change and no other to a plane label. Once labelled, the domain leaves this watch and enters
// the plane's own cache, and is reconciled as any other.
package domainlabel

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/metrics"
	"cdplane/internal/scheme"
)

// Mode says when a plane labels its domains itself.
type Mode string

// Modes of --label-domains.
const (
	// Auto labels when the apiserver serves no MutatingAdmissionPolicy v1 (Kubernetes < 1.36).
	Auto Mode = "auto"
	// Always labels whatever the apiserver serves (harmless next to the admission policy).
	Always Mode = "true"
	// Never leaves labelling to the admission policy alone.
	Never Mode = "false"
)

// ParseMode reads a --label-domains value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Auto, Always, Never:
		return m, nil
	case "":
		return Auto, nil
	}
	return "", fmt.Errorf("--label-domains must be auto, true or false, got %q", s)
}

// MutatingPolicyServed reports whether the apiserver serves MutatingAdmissionPolicy in
// admissionregistration.k8s.io/v1 (GA and on by default since Kubernetes 1.36).
func MutatingPolicyServed(cfg *rest.Config) (bool, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false, err
	}
	list, err := dc.ServerResourcesForGroupVersion("admissionregistration.k8s.io/v1")
	if err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("discovering admissionregistration.k8s.io/v1: %w", err)
	}
	for _, r := range list.APIResources {
		if r.Name == "mutatingadmissionpolicies" {
			return true, nil
		}
	}
	return false, nil
}

// MutatingPolicyName is the prerequisites' MutatingAdmissionPolicy that stamps the label.
const MutatingPolicyName = "compute-domain-control-plane-label.nvidia.com"

// Enabled resolves mode for a plane: the legacy plane (id "") never labels (its domains carry
// no label); Auto labels unless the apiserver serves MutatingAdmissionPolicy v1 and the
// prerequisites' policy is installed. A cluster upgraded to 1.36 without `cdplane apply
// prerequisites` serves the kind but holds no such policy (the chart left it out before): a
// labeller turned off there would leave new domains unlabelled and unreconciled. why says what
// decided, for the log; a policy that cannot be read (Forbidden to an older chart's role)
// counts as missing, since labelling next to the policy is harmless.
func Enabled(ctx context.Context, cfg *rest.Config, mode Mode, planeID string) (on bool, why string, err error) {
	switch {
	case planeID == "" || mode == Never:
		return false, "", nil
	case mode == Always:
		return true, "--label-domains=true", nil
	}
	served, err := MutatingPolicyServed(cfg)
	if err != nil || !served {
		return !served, "the apiserver serves no MutatingAdmissionPolicy v1 (Kubernetes before 1.36)", err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false, "", err
	}
	_, err = cs.AdmissionregistrationV1().MutatingAdmissionPolicies().Get(ctx, MutatingPolicyName, metav1.GetOptions{})
	switch {
	case err == nil:
		return false, "", nil
	case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
		return true, "the apiserver serves MutatingAdmissionPolicy v1, but " + MutatingPolicyName +
			" is not installed (run `cdplane apply prerequisites` once after upgrading Kubernetes to 1.36 or later)", nil
	}
	return false, "", fmt.Errorf("reading MutatingAdmissionPolicy %s: %w", MutatingPolicyName, err)
}

// Labeller stamps this plane's id on unlabelled ComputeDomains in the namespaces assigned to it.
type Labeller struct {
	// Client writes (the patch) and Reader reads namespaces from the apiserver.
	Client client.Client
	Reader client.Reader
	// Domains is the metadata cache of unlabelled ComputeDomains (NewCache).
	Domains        cache.Cache
	ControlPlaneID string
}

// Selector selects ComputeDomains without a plane label.
func Selector() labels.Selector {
	req, err := labels.NewRequirement(cdv1beta1.ControlPlaneLabel, selection.DoesNotExist, nil)
	if err != nil {
		panic(err) // constant key
	}
	return labels.NewSelector().Add(*req)
}

func domainMeta() *metav1.PartialObjectMetadata {
	m := scheme.Meta(cdv1beta1.GroupVersion.WithKind("ComputeDomain"))
	return m
}

// NewCache returns the cache behind the labeller's watch: ComputeDomain metadata, label absent.
func NewCache(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
	opts.ByObject = map[client.Object]cache.ByObject{domainMeta(): {Label: Selector()}}
	opts.DefaultTransform = cache.TransformStripManagedFields()
	return cache.New(cfg, opts)
}

// SetupWithManager adds the cache and the labelling controller to mgr (leader only).
func (l *Labeller) SetupWithManager(mgr ctrl.Manager, skipNameValidation *bool) error {
	if err := mgr.Add(l.Domains); err != nil {
		return err
	}
	return builder.TypedControllerManagedBy[reconcile.Request](mgr).
		Named("computedomain-labeller").
		WithOptions(controller.Options{MaxConcurrentReconciles: 2, SkipNameValidation: skipNameValidation}).
		WatchesRawSource(source.Kind(l.Domains, client.Object(domainMeta()), &handler.EnqueueRequestForObject{})).
		Complete(l)
}

// Reconcile labels one domain when its namespace belongs to this plane.
func (l *Labeller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	cd := domainMeta()
	if err := l.Domains.Get(ctx, req.NamespacedName, cd); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if _, ok := cd.Labels[cdv1beta1.ControlPlaneLabel]; ok || !cd.DeletionTimestamp.IsZero() {
		// Labelled meanwhile, or going: a domain being deleted keeps the label it has.
		return reconcile.Result{}, nil
	}
	ns := &corev1.Namespace{}
	if err := l.Reader.Get(ctx, client.ObjectKey{Name: cd.Namespace}, ns); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(fmt.Errorf("reading namespace %s: %w", cd.Namespace, err))
	}
	if ns.Labels[cdv1beta1.ControlPlaneLabel] != l.ControlPlaneID {
		// Another plane's namespace, or nobody's: not this plane's domain.
		return reconcile.Result{}, nil
	}
	patch := fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"labels":{%q:%q}}}`,
		cd.ResourceVersion, cdv1beta1.ControlPlaneLabel, l.ControlPlaneID)
	if err := l.Client.Patch(ctx, cd, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// Changed or gone since it was read: the watch brings the new version.
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
		return reconcile.Result{}, fmt.Errorf("labelling ComputeDomain %s for control plane %q: %w", klog.KObj(cd), l.ControlPlaneID, err)
	}
	metrics.DomainsLabelled.WithLabelValues(l.ControlPlaneID).Inc()
	log.Info("Labelled ComputeDomain for this control plane (its namespace is assigned to it; no admission policy did)",
		"controlPlaneID", l.ControlPlaneID)
	return reconcile.Result{}, nil
}
