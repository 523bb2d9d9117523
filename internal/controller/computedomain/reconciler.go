// Package computedomain reconciles ComputeDomains: finalizer, ResourceClaimTemplates, the daemon
// DaemonSet, membership (cliques or status.nodes, built from the daemon pods) and status. The
// controller is the only writer of cliques and of ComputeDomain status.
package computedomain

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"
	"k8s.io/kubectl/pkg/util/podutils"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/membership"
	"cdplane/internal/daemonenv"
	"cdplane/internal/features"
	"cdplane/internal/metrics"
	"cdplane/internal/plane"
	"cdplane/internal/scheme"
)

// Options configure the reconciler.
type Options struct {
	// DriverNamespace holds the daemon DaemonSets, daemon claim templates, pods and cliques.
	DriverNamespace string
	// DaemonImage, DaemonBinary, DaemonServiceAccount, DaemonPriorityClass shape the daemon pods.
	DaemonImage          string
	DaemonBinary         string
	DaemonServiceAccount string
	DaemonPriorityClass  string
	DaemonLogVerbosity   int
	// DaemonFeatureGates is passed to the daemons (FEATURE_GATES): features.DaemonGates, with
	// ComputeDomainCliques, which tells a daemon whether to wait for its clique before reading
	// the domain's status. An existing DaemonSet keeps the ComputeDomainCliques value it was
	// created with (keepCliquesGate): a flip never changes a live DaemonSet.
	DaemonFeatureGates string
	// DaemonMetricsPort is the port of the daemons' metrics endpoint on their pod's IP, declared
	// as the container port "metrics"; 0: off (no argument, no port).
	DaemonMetricsPort int32
	// MaxNodesPerIMEXDomain bounds indexes within a clique.
	MaxNodesPerIMEXDomain int
	// BatchWindow is how long events for one domain are collected before it is reconciled, so
	// that a burst of daemon changes costs one write per object.
	BatchWindow time.Duration
	// FieldManager names the controller's server-side apply field manager.
	FieldManager string
	// Gates are the feature gates read by the reconciler; default: every gate at its default.
	Gates featuregate.FeatureGate
	// ControlPlaneID is the plane this controller serves ("" for the legacy plane).
	ControlPlaneID string
	// IMEXMode is who runs IMEX on the plane's nodes. hostManaged: no daemon DaemonSet or daemon
	// claim template is created, channel claims get one channel (Single), and membership comes
	// from the kubelet-plugin pods (see hostMembershipPods). Requires the HostManagedIMEXDaemon
	// gate.
	IMEXMode features.IMEXMode
	// TakeOverFrom is the driver namespace of NVIDIA's driver that ran ComputeDomains before
	// cdplane: what its controller and daemons created for a domain there (DaemonSet, daemon
	// claim template, cliques) and its channel claim template in the domain's namespace are
	// removed when cdplane first reconciles the domain, so that cdplane's own take their place.
	// Empty: nothing is taken over.
	TakeOverFrom string
	// DaemonUpdateStrategy is the update strategy of the daemon DaemonSets (OnDelete, the
	// default, or RollingUpdate): how a changed daemon template (a new image, arguments, feature
	// gates) reaches the daemons of live domains. See daemonUpdateStrategy.
	DaemonUpdateStrategy appsv1.DaemonSetUpdateStrategyType
	// Events posts the domains' events (nodes joined or left, Ready or NotReady, nodes blocked),
	// aggregated and rate-limited (see events.go); nil posts none.
	Events *Events
	// CliqueWritten, when set, is called after each successful clique write with the clique as
	// written, from the goroutine that wrote it (several at once). It must not keep or modify
	// the clique. The benchmark times membership with it: when a clique first named a node.
	CliqueWritten func(*cdv1beta1.ComputeDomainClique)
}

// Defaults fills unset options.
func (o *Options) Defaults() {
	if o.DaemonBinary == "" {
		o.DaemonBinary = "cdplane-daemon"
	}
	if o.MaxNodesPerIMEXDomain == 0 {
		o.MaxNodesPerIMEXDomain = cdv1beta1.DefaultMaxNodesPerIMEXDomain
	}
	if o.BatchWindow == 0 {
		o.BatchWindow = 200 * time.Millisecond
	}
	if o.FieldManager == "" {
		o.FieldManager = "cdplane-controller"
	}
	if o.Gates == nil {
		o.Gates = features.NewGates()
	}
	if o.IMEXMode == "" {
		o.IMEXMode = features.IMEXDriverManaged
	}
	if o.DaemonUpdateStrategy == "" {
		o.DaemonUpdateStrategy = appsv1.OnDeleteDaemonSetStrategyType
	}
}

// Validate returns an error naming the first invalid option.
func (o *Options) Validate() error {
	switch {
	case o.DriverNamespace == "":
		return fmt.Errorf("the driver namespace is required")
	case o.MaxNodesPerIMEXDomain < 1 || o.MaxNodesPerIMEXDomain > cdv1beta1.MaxDaemonsPerClique:
		return fmt.Errorf("--max-nodes-per-imex-domain must be between 1 and %d, got %d", cdv1beta1.MaxDaemonsPerClique, o.MaxNodesPerIMEXDomain)
	case o.TakeOverFrom != "" && o.TakeOverFrom == o.DriverNamespace:
		return fmt.Errorf("--take-over-from %s is this plane's own driver namespace: name the namespace NVIDIA's driver ran in", o.TakeOverFrom)
	case o.DaemonUpdateStrategy != appsv1.OnDeleteDaemonSetStrategyType && o.DaemonUpdateStrategy != appsv1.RollingUpdateDaemonSetStrategyType:
		return fmt.Errorf("--daemon-update-strategy must be %s or %s, got %q", appsv1.OnDeleteDaemonSetStrategyType, appsv1.RollingUpdateDaemonSetStrategyType, o.DaemonUpdateStrategy)
	}
	if err := daemonenv.ValidateMetricsPort("--daemon-metrics-port", int(o.DaemonMetricsPort)); err != nil {
		return err
	}
	_, err := features.ParseIMEXMode(string(o.IMEXMode), o.Gates)
	return err
}

// Reconciler reconciles ComputeDomains.
type Reconciler struct {
	client client.Client
	// reader reads from the apiserver, bypassing the cache, for objects the cache does not hold.
	reader client.Reader
	opts   Options
	// tookOver holds the UIDs of domains that takeOver found nothing left for.
	tookOver sync.Map
	// written is what this controller last wrote per domain, read over a cache that lags it.
	written *written
	// statusWrites writes the domains' statuses apart from their passes (cliques on).
	statusWrites *statusWrites
	// created is what this controller created and its cache may not show yet.
	created *created
	// rests spaces a domain's long passes (see passRests); nil (a reconciler used without a
	// manager, whose caller makes each pass it wants): no rests.
	rests *passRests
}

// New returns a reconciler reading from the cache through c, from the apiserver through reader,
// and writing through c.
func New(c client.Client, reader client.Reader, opts Options) *Reconciler {
	opts.Defaults()
	return &Reconciler{client: c, reader: reader, opts: opts, written: newWritten(), statusWrites: newStatusWrites(), created: newCreated()}
}

// Reconcile brings one ComputeDomain's objects, membership and status up to date.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	if wait := r.rests.wait(req.NamespacedName); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	start, hint := time.Now(), passHint{}
	defer func() { r.rests.passed(req.NamespacedName, start, r.opts.BatchWindow, hint) }()
	cd := &cdv1beta1.ComputeDomain{}
	if err := r.client.Get(ctx, req.NamespacedName, cd); err != nil {
		if apierrors.IsNotFound(err) {
			r.written.forget(req.NamespacedName)
			r.rests.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// What the domain's pods look like as the pass reads them (see passRests).
	hint = r.rests.hint(string(cd.UID), cd.Spec.NumNodes)
	if !plane.Owns(r.opts.ControlPlaneID, cd.Labels) {
		refuse(ctx, r.opts.ControlPlaneID, "ComputeDomain", klog.KObj(cd).String())
		return ctrl.Result{}, nil
	}
	if !cd.DeletionTimestamp.IsZero() {
		r.written.forget(req.NamespacedName)
		return r.finalize(ctx, cd)
	}
	// The version the cache showed, before this pass's own writes (the finalizer) change it,
	// and the status as this controller last wrote it, should the cache not show that write yet:
	// the pass computes, compares and reports from what was written, not from a lagging copy.
	cachedVersion := cd.ResourceVersion
	cd.Status = r.written.status(cd)
	step := r.stepTimer()
	// Host-managed: no DaemonSet owns clique objects, so membership lives in status.nodes, as
	// with the ComputeDomainCliques gate off.
	useCliques := r.opts.Gates.Enabled(features.ComputeDomainCliques) && !r.hostManaged()
	if !controllerutil.ContainsFinalizer(cd, cdv1beta1.Finalizer) {
		if ok, err := r.domainOwnedOnServer(ctx, cd); !ok || err != nil {
			return ctrl.Result{}, err
		}
		if ok, err := r.legacyNamespace(ctx, cd); !ok || err != nil {
			return ctrl.Result{}, err
		}
		orig := cd.DeepCopy()
		controllerutil.AddFinalizer(cd, cdv1beta1.Finalizer)
		metav1.SetMetaDataAnnotation(&cd.ObjectMeta, cdv1beta1.MembershipAnnotation, membershipPlace(useCliques))
		if err := r.client.Patch(ctx, cd, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
		log.V(1).Info("Added finalizer")
	}
	if ok, err := r.markMembership(ctx, cd, useCliques); !ok || err != nil {
		return ctrl.Result{}, err
	}

	tookOver, err := r.takeOver(ctx, cd)
	if err != nil {
		return ctrl.Result{}, err
	}
	created, ds, err := r.ensureResources(ctx, cd)
	if errors.Is(err, errNotOwned) {
		return ctrl.Result{}, nil // another plane's now: its events are that plane's
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	step.done(metrics.ReconcileStepResources)

	res, err := r.computeMembership(ctx, cd, ds, !useCliques)
	if err != nil {
		return ctrl.Result{}, err
	}
	step.done(metrics.ReconcileStepMembership)
	st := membership.Aggregate(res, cd.Spec.NumNodes, cd.Generation, cd.Status.Conditions)
	meta.SetStatusCondition(&st.Conditions, created)
	if useCliques {
		// The daemons wait for their cliques; the status is written apart from the pass (see
		// statusWrites), so that the next pass's cliques need not wait for a status apply of
		// thousands of entries. It starts first, to be written at the same time as the cliques
		// (neither reads the other), from a copy: the pass goes on with cd.
		own, statusStep := cd.DeepCopy(), *step
		if err := r.statusWrites.write(ctx, req.NamespacedName, st, func(ctx context.Context) error {
			defer statusStep.since(metrics.ReconcileStepStatus)
			return r.writeStatus(ctx, own, st, cachedVersion)
		}); err != nil {
			return ctrl.Result{}, err
		}
		err := r.writeCliques(ctx, cd, ds, res)
		step.since(metrics.ReconcileStepCliques)
		if err != nil {
			return ctrl.Result{}, err
		}
	} else {
		// status.nodes is the membership the daemons read: written within the pass.
		err := r.writeStatus(ctx, cd, st, cachedVersion)
		step.since(metrics.ReconcileStepStatus)
		if err != nil {
			return ctrl.Result{}, err
		}
	}
	r.opts.Events.Observe(ctx, cd, res, st)
	r.observeJoins(cd, res)
	if !useCliques {
		// Membership now lives in status.nodes: cliques left from the gate being on go, after
		// the status holding their entries was written.
		if err := r.deleteCliques(ctx, cd, nil); err != nil {
			return ctrl.Result{}, err
		}
	}
	if tookOver {
		// What the previous controller left is going: look again until cdplane's own objects
		// stand in its place (a template of the same name may still have been there).
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	return ctrl.Result{}, nil
}

// membershipPlace is the value of cdv1beta1.MembershipAnnotation.
func membershipPlace(useCliques bool) string {
	if useCliques {
		return cdv1beta1.MembershipInCliques
	}
	return cdv1beta1.MembershipInStatus
}

// markMembership sets cdv1beta1.MembershipAnnotation where it does not say where this pass keeps
// the domain's membership (a domain taken before the annotation existed, or a flip of the
// ComputeDomainCliques gate). The kubelet plugins watch domains' metadata and read it: with it
// they read status.nodes only where the entries are, instead of guessing from a missing clique
// after minutes of waiting (in a burst, a read of the whole, large status by every waiting node).
// It reports false when the domain, read from the server, is not this plane's: the pass ends.
func (r *Reconciler) markMembership(ctx context.Context, cd *cdv1beta1.ComputeDomain, useCliques bool) (bool, error) {
	want := membershipPlace(useCliques)
	if cd.Annotations[cdv1beta1.MembershipAnnotation] == want {
		return true, nil
	}
	// Checked against the server first, as before every write to a domain: the cache may still
	// show a domain that has moved to another plane.
	if ok, err := r.domainOwnedOnServer(ctx, cd); !ok || err != nil {
		return false, err
	}
	orig := cd.DeepCopy()
	metav1.SetMetaDataAnnotation(&cd.ObjectMeta, cdv1beta1.MembershipAnnotation, want)
	if err := r.client.Patch(ctx, cd, client.MergeFrom(orig)); err != nil {
		return false, fmt.Errorf("annotating where membership is kept: %w", err)
	}
	return true, nil
}

// computeMembership reads the domain's daemon pods, labelled nodes, allocated channel claims and
// existing entries. Only pods controlled by ds count as daemons (none while ds is nil: its name
// is taken). statusOnly says membership lives in status.nodes only (cliques off).
func (r *Reconciler) computeMembership(ctx context.Context, cd *cdv1beta1.ComputeDomain, ds *appsv1.DaemonSet, statusOnly bool) (membership.Result, error) {
	// The lists below read the cache without copying (client.UnsafeDisableDeepCopy): a pass
	// reads every daemon pod, node and claim of the domain and only reads them; a copy of each,
	// on every list of every pass, is garbage and CPU that grow with the domain (see
	// docs/scale.md, "Design choices and what was measured"). Nothing here may modify what they
	// return.
	uid := string(cd.UID)
	in := membership.Input{MaxNodes: r.opts.MaxNodesPerIMEXDomain, LabelledNodes: sets.New[string](), StatusOnly: statusOnly}

	nodes := scheme.MetaList(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := r.client.List(ctx, nodes, client.MatchingLabels{cdv1beta1.ComputeDomainLabel: uid}, client.UnsafeDisableDeepCopy); err != nil {
		return membership.Result{}, fmt.Errorf("listing nodes of the domain: %w", err)
	}
	for _, n := range nodes.Items {
		in.LabelledNodes.Insert(n.Name)
	}
	allocated, err := r.allocatedNodes(ctx, cd)
	if err != nil {
		return membership.Result{}, err
	}
	in.AllocatedNodes = allocated

	if r.hostManaged() {
		pods, err := r.hostMembershipPods(ctx, nodes.Items)
		if err != nil {
			return membership.Result{}, err
		}
		in.Pods = pods
	} else {
		pods := &corev1.PodList{}
		if err := r.client.List(ctx, pods, client.InNamespace(r.opts.DriverNamespace), client.MatchingLabels{cdv1beta1.ComputeDomainLabel: uid}, client.UnsafeDisableDeepCopy); err != nil {
			return membership.Result{}, fmt.Errorf("listing daemon pods: %w", err)
		}
		for i := range pods.Items {
			in.Pods = append(in.Pods, podInfo(&pods.Items[i], ds))
		}
	}

	// Existing entries: status.nodes, overridden by cliques (they are the source of truth when
	// they exist). Reading both lets either gate setting take over the other's indexes.
	byNode := map[string]membership.Entry{}
	for _, n := range cd.Status.Nodes {
		byNode[n.Name] = membership.Entry{NodeName: n.Name, IPAddress: n.IPAddress, CliqueID: n.CliqueID, Index: n.Index, Status: n.Status}
	}
	cliques, err := r.listCliques(ctx, cd)
	if err != nil {
		return membership.Result{}, err
	}
	for _, c := range cliques {
		for _, d := range c.Daemons {
			byNode[d.NodeName] = d
		}
	}
	for _, e := range byNode {
		in.Existing = append(in.Existing, e)
	}
	return membership.Compute(in), nil
}

func podInfo(p *corev1.Pod, ds *appsv1.DaemonSet) membership.Pod {
	clique, labelled := p.Labels[cdv1beta1.CliqueIDLabel]
	out := membership.Pod{
		NodeName: p.Spec.NodeName, IP: p.Status.PodIP, CliqueID: clique, Labelled: labelled,
		Terminating: p.DeletionTimestamp != nil, Created: p.CreationTimestamp.Time,
		Blocked: p.Labels[cdv1beta1.IMEXBlockedLabel],
	}
	if ds != nil && ds.UID != "" {
		owner := metav1.GetControllerOf(p)
		out.Owned = owner != nil && owner.UID == ds.UID && owner.Kind == "DaemonSet" && owner.Name == ds.Name
	}
	out.Ready = podutils.IsPodReady(p)
	return out
}

// writeStatus applies the status when it differs from what the domain holds (cd.Status: as
// cached, or as last written when the cache has not seen that write yet). cachedVersion is the
// domain's version in the cache when the pass began.
func (r *Reconciler) writeStatus(ctx context.Context, cd *cdv1beta1.ComputeDomain, st cdv1beta1.ComputeDomainStatus, cachedVersion string) error {
	if equality.Semantic.DeepEqual(cd.Status, st) {
		return nil
	}
	if ok, err := r.domainOwnedOnServer(ctx, cd); !ok || err != nil {
		return err
	}
	ac := StatusApply(cd, st)
	if err := r.client.Status().Apply(ctx, ac, client.FieldOwner(r.opts.FieldManager), client.ForceOwnership); err != nil {
		r.written.unknownStatus(cd)
		return fmt.Errorf("writing status: %w", err)
	}
	r.written.wroteStatus(cd, st, ptr.Deref(ac.ResourceVersion, ""), cachedVersion, cd.ResourceVersion)
	ctrl.LoggerFrom(ctx).V(1).Info("Wrote status", "status", st.Status,
		"readyNodes", st.ReadyNodes, "totalNodes", st.TotalNodes)
	return nil
}
