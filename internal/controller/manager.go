// Package controller wires cdplane's controllers into one controller-runtime manager: scoped
// caches, leader election, the ComputeDomain reconciler and the orphan cleaner.
package controller

import (
	"context"
	"fmt"
	"maps"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/component"
	"cdplane/internal/controller/cleanup"
	"cdplane/internal/controller/computedomain"
	"cdplane/internal/controller/domainlabel"
	"cdplane/internal/controller/secretmirror"
	"cdplane/internal/features"
	"cdplane/internal/metrics"
	"cdplane/internal/plane"
	"cdplane/internal/scheme"
)

// Options configure the controller manager.
type Options struct {
	computedomain.Options

	// Workers is the number of ComputeDomains reconciled concurrently.
	Workers int
	// MetricsAddr and ProbeAddr are the metrics and health endpoints ("0" disables).
	MetricsAddr string
	ProbeAddr   string
	// LeaderElection turns on leader election with lease LeaderElectionID in the driver namespace.
	LeaderElection   bool
	LeaderElectionID string
	// LeaderElectionIdentity is this replica's name in the lease's holderIdentity: the pod's
	// name (POD_NAME), so that the lease says which pod leads. Empty: the host name and a
	// random suffix (controller-runtime's default).
	LeaderElectionIdentity string
	// LeaseDuration, RenewDeadline and RetryPeriod time leader election (zero: the
	// controller-runtime defaults, 15s, 10s and 2s). A loaded apiserver that answers a lease
	// renewal slower than RenewDeadline costs the leadership, and a restart.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// CleanupInterval is how often orphans are looked for.
	CleanupInterval time.Duration
	// SkipNameValidation allows several managers in one process (tests).
	SkipNameValidation bool
	// SecretMirror configures Secret mirroring; a nil SecretSelector turns it off. Its
	// ControlPlaneID is the manager's, and its SourceNamespace defaults to the driver namespace.
	SecretMirror secretmirror.Options
	// DomainSelector restricts the ComputeDomains this manager caches and reconciles.
	DomainSelector labels.Selector
	// LabelDomains says when the plane labels unlabelled domains in its namespaces itself
	// (domainlabel.Auto when empty: where the apiserver serves no MutatingAdmissionPolicy v1).
	LabelDomains domainlabel.Mode
}

// Defaults fills unset options.
func (o *Options) Defaults() {
	o.Options.Defaults()
	if o.Workers == 0 {
		o.Workers = 8
	}
	if o.LeaderElectionID == "" {
		o.LeaderElectionID = plane.Name(o.ControlPlaneID, "cdplane-controller")
	}
	if o.MetricsAddr == "" {
		o.MetricsAddr = "0"
	}
	if o.ProbeAddr == "" {
		o.ProbeAddr = "0"
	}
	if o.LabelDomains == "" {
		o.LabelDomains = domainlabel.Auto
	}
}

// NewManager returns a manager running the controllers. Every watch is scoped at the cache:
// daemon pods, DaemonSets and cliques to the driver namespace and the domain label, claim
// templates, channel claims and nodes (metadata only) to the domain label.
func NewManager(ctx context.Context, cfg *rest.Config, o Options) (ctrl.Manager, error) {
	o.Defaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if err := plane.ValidateID(o.ControlPlaneID); err != nil {
		return nil, err
	}
	byObject, err := cacheByObject(o)
	if err != nil {
		return nil, err
	}
	var mirror *secretmirror.Reconciler
	if o.SecretMirror.SecretSelector != nil {
		o.SecretMirror.ControlPlaneID = o.ControlPlaneID
		if o.SecretMirror.SourceNamespace == "" {
			o.SecretMirror.SourceNamespace = o.DriverNamespace
		}
		if mirror, err = secretmirror.New(o.SecretMirror); err != nil {
			return nil, err
		}
		maps.Copy(byObject, secretmirror.CacheByObject(o.SecretMirror))
	}
	var lock resourcelock.Interface
	if o.LeaderElection && o.LeaderElectionIdentity != "" {
		if lock, err = leaseLock(cfg, o); err != nil {
			return nil, err
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		LeaderElectionResourceLockInterface: lock,
		Scheme:                              scheme.New(),
		NewClient:                           countingClient(o.ControlPlaneID),
		Metrics:                             metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:              o.ProbeAddr,
		LeaderElection:                      o.LeaderElection,
		LeaderElectionID:                    o.LeaderElectionID,
		LeaderElectionNamespace:             o.DriverNamespace,
		LeaderElectionReleaseOnCancel:       true,
		// Lease renewals on a connection of their own: behind slow watch streams on the shared
		// one they stalled past their deadline in large domains and cost the leadership.
		LeaderElectionConfig: component.OwnConnection(cfg),
		LeaseDuration:        durationOrNil(o.LeaseDuration),
		RenewDeadline:        durationOrNil(o.RenewDeadline),
		RetryPeriod:          durationOrNil(o.RetryPeriod),
		Controller:           config.Controller{SkipNameValidation: &o.SkipNameValidation},
		Cache: cache.Options{
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject:         byObject,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	if o.Events == nil {
		// events.k8s.io/v1, through the manager's broadcaster (started on the first event,
		// flushed when the manager stops).
		o.Events = computedomain.NewEvents(mgr.GetEventRecorder(computedomain.EventReportingController), computedomain.EventLimits{})
	}
	cdClient, err := computedomain.NewClient(mgr)
	if err != nil {
		return nil, fmt.Errorf("creating the ComputeDomain controller's client: %w", err)
	}
	r := computedomain.New(metrics.CountWrites(cdClient, o.ControlPlaneID), mgr.GetAPIReader(), o.Options)
	if err := r.SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: o.Workers, SkipNameValidation: &o.SkipNameValidation}); err != nil {
		return nil, fmt.Errorf("setting up the ComputeDomain controller: %w", err)
	}
	if err := addMetrics(mgr, o.ControlPlaneID); err != nil {
		return nil, fmt.Errorf("setting up the controller's metrics: %w", err)
	}
	if mirror != nil {
		if err := mirror.SetupWithManager(mgr); err != nil {
			return nil, fmt.Errorf("setting up the Secret mirror: %w", err)
		}
	}
	labelDomains, why, err := domainlabel.Enabled(ctx, cfg, o.LabelDomains, o.ControlPlaneID)
	if err != nil {
		return nil, fmt.Errorf("deciding whether to label ComputeDomains (--label-domains=auto): %w", err)
	}
	if labelDomains {
		ctrl.LoggerFrom(ctx).Info("Labelling this plane's unlabelled ComputeDomains", "why", why, "controlPlaneID", o.ControlPlaneID)
		domains, err := domainlabel.NewCache(cfg, cache.Options{HTTPClient: mgr.GetHTTPClient(), Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
		if err != nil {
			return nil, fmt.Errorf("creating the unlabelled-domain cache: %w", err)
		}
		l := &domainlabel.Labeller{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Domains: domains, ControlPlaneID: o.ControlPlaneID}
		if err := l.SetupWithManager(mgr, &o.SkipNameValidation); err != nil {
			return nil, fmt.Errorf("setting up the ComputeDomain labeller: %w", err)
		}
	}
	if err := mgr.Add(&cleanup.Cleaner{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Cache: mgr.GetCache(),
		DriverNamespace: o.DriverNamespace, Interval: o.CleanupInterval, ControlPlaneID: o.ControlPlaneID,
	}); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	return mgr, nil
}

// cacheByObject scopes every watch of the manager's cache to this plane: objects labelled for a
// domain and, by the plane label, this plane's (the legacy plane: objects without the label);
// daemon pods, DaemonSets and cliques also to the driver namespace.
func cacheByObject(o Options) (map[client.Object]cache.ByObject, error) {
	req, err := labels.NewRequirement(cdv1beta1.ComputeDomainLabel, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	planeReqs, _ := plane.Selector(o.ControlPlaneID).Requirements()
	labelled := labels.NewSelector().Add(*req).Add(planeReqs...)
	domains := plane.Selector(o.ControlPlaneID)
	if o.DomainSelector != nil {
		extra, _ := o.DomainSelector.Requirements()
		domains = domains.Add(extra...)
	}
	driverNS := map[string]cache.Config{o.DriverNamespace: {}}
	nodeMeta := scheme.Meta(corev1.SchemeGroupVersion.WithKind("Node"))

	// Pods: the daemon pods, labelled for a domain; with host-managed IMEX, where no daemon
	// runs, the plane's kubelet-plugin pods, whose readiness is their node's host IMEX's.
	pods := labelled
	if o.IMEXMode == features.IMEXHostManaged {
		pods = labels.SelectorFromSet(computedomain.PluginPodLabels()).Add(planeReqs...)
	}
	byObject := map[client.Object]cache.ByObject{
		&corev1.Pod{}:                       {Namespaces: driverNS, Label: pods},
		&appsv1.DaemonSet{}:                 {Namespaces: driverNS, Label: labelled},
		&cdv1beta1.ComputeDomainClique{}:    {Namespaces: driverNS, Label: labelled},
		&resourcev1.ResourceClaimTemplate{}: {Label: labelled},
		// Channel claims, made from the domain's template, carry its labels; membership
		// requires one allocated on a node (computedomain.allocatedNodes), and that is all of a
		// claim the controller reads: the cache keeps its metadata and allocation only.
		&resourcev1.ResourceClaim{}: {Label: labelled, Transform: claimAllocationOnly},
		nodeMeta:                    {Label: labelled},
		&cdv1beta1.ComputeDomain{}:  {Label: domains},
	}
	return byObject, nil
}

func durationOrNil(d time.Duration) *time.Duration {
	if d <= 0 {
		return nil
	}
	return &d
}

// leaseLock is the leader-election Lease lock with this replica's identity, on a connection of
// its own (as controller-runtime builds it), with a request timeout of half the renew deadline
// so that one hung request cannot cost the leadership.
func leaseLock(cfg *rest.Config, o Options) (resourcelock.Interface, error) {
	c := rest.AddUserAgent(component.OwnConnection(cfg), "leader-election")
	renew := o.RenewDeadline
	if renew <= 0 {
		renew = 10 * time.Second
	}
	c.Timeout = max(renew/2, time.Second)
	core, err := corev1client.NewForConfig(c)
	if err != nil {
		return nil, err
	}
	coord, err := coordinationv1client.NewForConfig(c)
	if err != nil {
		return nil, err
	}
	return resourcelock.New(resourcelock.LeasesResourceLock, o.DriverNamespace, o.LeaderElectionID, core, coord,
		resourcelock.ResourceLockConfig{Identity: o.LeaderElectionIdentity})
}

// claimAllocationOnly strips a cached ResourceClaim down to what membership reads: its metadata
// (without managed fields) and its allocation. Its spec, reservations and device statuses are
// memory a tenant's claims would otherwise hold in every plane's controller that selects them.
func claimAllocationOnly(obj any) (any, error) {
	c, ok := obj.(*resourcev1.ResourceClaim)
	if !ok {
		return obj, nil
	}
	c.ManagedFields = nil
	c.Spec = resourcev1.ResourceClaimSpec{}
	c.Status.ReservedFor = nil
	c.Status.Devices = nil
	return c, nil
}
