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

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"
	"k8s.io/kubectl/pkg/util/podutils"
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

// Reconciler reconciles ComputeDomains. Each pass reads the domain through a client whose reads
// wait for the cache to show this controller's own earlier writes (see NewClient), builds a
// scope, runs the phases of Reconcile on it and ends with its writes: the cliques and the one
// status write of the pass.
type Reconciler struct {
	client client.Client
	// reader reads from the apiserver, bypassing the cache, for objects the cache does not hold.
	reader client.Reader
	opts   Options
	// tookOver holds the UIDs of domains that takeOver found nothing left for.
	tookOver sync.Map
	// pacer spaces a large domain's passes and status writes (see pacer); without a manager
	// (a caller that makes each pass it wants) nothing is spaced.
	pacer *pacer
}

// New returns a reconciler reading from the cache through c, from the apiserver through reader,
// and writing through c. c should be NewClient's (a plain cached client reads a cache that may
// not yet show the previous pass's writes: see NewClient).
func New(c client.Client, reader client.Reader, opts Options) *Reconciler {
	opts.Defaults()
	return &Reconciler{client: c, reader: reader, opts: opts}
}

// scope is what one pass knows of its domain: read at the start, filled in by the phases, and
// written at the end.
type scope struct {
	key types.NamespacedName
	cd  *cdv1beta1.ComputeDomain
	// useCliques: membership lives in cliques (the ComputeDomainCliques gate, not host-managed);
	// otherwise in status.nodes.
	useCliques bool
	// tookOver: what the previous controller left is being removed (takeOver).
	tookOver bool
	// resources is the ResourcesCreated condition; ds the domain's DaemonSet (nil while its name
	// is taken by another object).
	resources metav1.Condition
	ds        *appsv1.DaemonSet
	// members is the membership computed from the daemon pods; status what the domain's status
	// should say.
	members membership.Result
	status  cdv1beta1.ComputeDomainStatus
	// requeue asks for another pass after this long (0: none).
	requeue time.Duration
	step    *stepTimer
}

// requeueAfter asks for another pass within d.
func (s *scope) requeueAfter(d time.Duration) {
	if d > 0 && (s.requeue == 0 || d < s.requeue) {
		s.requeue = d
	}
}

// phase is one step of a pass. It reports false when the pass ends there (the domain is not
// this plane's, or a write must be seen before going on).
type phase func(context.Context, *scope) (bool, error)

// Reconcile brings one ComputeDomain's objects, membership and status up to date: the phases in
// order, then the pass's writes.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if wait := r.pacer.passWait(req.NamespacedName); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	cd := &cdv1beta1.ComputeDomain{}
	if err := r.client.Get(ctx, req.NamespacedName, cd); err != nil {
		if apierrors.IsNotFound(err) {
			r.pacer.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !plane.Owns(r.opts.ControlPlaneID, cd.Labels) {
		refuse(ctx, r.opts.ControlPlaneID, "ComputeDomain", klog.KObj(cd).String())
		return ctrl.Result{}, nil
	}
	if !cd.DeletionTimestamp.IsZero() {
		r.pacer.forget(req.NamespacedName)
		return r.finalize(ctx, cd)
	}
	// What the domain's pods look like as the pass begins (see pacer.passed).
	start, hint := r.pacer.clock(), r.pacer.hint(string(cd.UID), cd.Spec.NumNodes)
	defer func() { r.pacer.passed(req.NamespacedName, start, r.opts.BatchWindow, hint) }()

	s := &scope{
		key: req.NamespacedName, cd: cd, step: r.stepTimer(),
		// Host-managed: no DaemonSet owns clique objects, so membership lives in status.nodes,
		// as with the ComputeDomainCliques gate off.
		useCliques: r.opts.Gates.Enabled(features.ComputeDomainCliques) && !r.hostManaged(),
	}
	for _, p := range []phase{r.ensureFinalizer, r.markMembership, r.takeOverPhase, r.ensureResourcesPhase, r.computeMembership} {
		if ok, err := p(ctx, s); !ok || err != nil {
			if errors.Is(err, errNotOwned) {
				return ctrl.Result{}, nil // another plane's now: its events are that plane's
			}
			return ctrl.Result{}, err
		}
	}
	if err := r.write(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	r.opts.Events.Observe(ctx, cd, s.members, s.status)
	r.observeJoins(cd, s.members)
	if s.tookOver {
		// What the previous controller left is going: look again until cdplane's own objects
		// stand in its place (a template of the same name may still have been there).
		s.requeueAfter(time.Second)
	}
	return ctrl.Result{RequeueAfter: s.requeue}, nil
}

// ensureFinalizer adds the finalizer, with the annotation saying where membership is kept, to a
// domain that has neither yet, after checking on the server that the domain is this plane's and
// in a namespace the plane may serve.
func (r *Reconciler) ensureFinalizer(ctx context.Context, s *scope) (bool, error) {
	cd := s.cd
	if controllerutil.ContainsFinalizer(cd, cdv1beta1.Finalizer) {
		return true, nil
	}
	if ok, err := r.domainOwnedOnServer(ctx, cd); !ok || err != nil {
		return false, err
	}
	if ok, err := r.legacyNamespace(ctx, cd); !ok || err != nil {
		return false, err
	}
	orig := cd.DeepCopy()
	controllerutil.AddFinalizer(cd, cdv1beta1.Finalizer)
	metav1.SetMetaDataAnnotation(&cd.ObjectMeta, cdv1beta1.MembershipAnnotation, membershipPlace(s.useCliques))
	if err := r.client.Patch(ctx, cd, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, fmt.Errorf("adding finalizer: %w", err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Added finalizer")
	return true, nil
}

// takeOverPhase removes what NVIDIA's driver left for the domain (takeOver).
func (r *Reconciler) takeOverPhase(ctx context.Context, s *scope) (bool, error) {
	tookOver, err := r.takeOver(ctx, s.cd)
	s.tookOver = tookOver
	return err == nil, err
}

// ensureResourcesPhase creates the domain's claim templates and DaemonSet, or brings them back
// to what they should be.
func (r *Reconciler) ensureResourcesPhase(ctx context.Context, s *scope) (bool, error) {
	cond, ds, err := r.ensureResources(ctx, s.cd)
	if err != nil {
		return false, err
	}
	s.resources, s.ds = cond, ds
	s.step.done(metrics.ReconcileStepResources)
	return true, nil
}

// write ends the pass: with cliques, the changed cliques and the status, at the same time
// (neither reads the other), except in the pass that turns the domain Ready: then the status
// first; without cliques, the status (status.nodes is the membership the daemons read), then the
// removal of cliques left from the gate being on.
func (r *Reconciler) write(ctx context.Context, s *scope) error {
	if !s.useCliques {
		err := r.writeStatus(ctx, s)
		s.step.since(metrics.ReconcileStepStatus)
		if err != nil {
			return err
		}
		// Membership now lives in status.nodes: cliques left from the gate being on go, after
		// the status holding their entries was written.
		return r.deleteCliques(ctx, s.cd, nil, nil)
	}
	// Flips may be held until the domain turns Ready (see pacer); the pass that turns it
	// Ready writes them all.
	ready := s.status.Status == cdv1beta1.StatusReady
	var held time.Duration
	writeCliques := func(ctx context.Context) error {
		defer s.step.since(metrics.ReconcileStepCliques)
		var err error
		held, err = r.writeCliques(ctx, s.key, s.cd, s.ds, s.members, !ready)
		return err
	}
	if ready && s.cd.Status.Status != cdv1beta1.StatusReady {
		// That pass may write every clique of the domain: the status first, so that it is
		// not queued behind them. A plugin takes a node's entry Ready from the status as from
		// its clique.
		err := r.writeStatus(ctx, s)
		s.step.since(metrics.ReconcileStepStatus)
		if err != nil {
			return err
		}
		return writeCliques(ctx)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer s.step.since(metrics.ReconcileStepStatus)
		return r.writeStatus(gctx, s)
	})
	g.Go(func() error { return writeCliques(gctx) })
	err := g.Wait()
	s.requeueAfter(held)
	return err
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
func (r *Reconciler) markMembership(ctx context.Context, s *scope) (bool, error) {
	cd, want := s.cd, membershipPlace(s.useCliques)
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

// computeMembership computes the domain's membership (membership.Compute) and the status that
// follows from it, into s.
func (r *Reconciler) computeMembership(ctx context.Context, s *scope) (bool, error) {
	res, err := r.readMembership(ctx, s.cd, s.ds, !s.useCliques)
	if err != nil {
		return false, err
	}
	s.step.done(metrics.ReconcileStepMembership)
	s.members = res
	s.status = membership.Aggregate(res, s.cd.Spec.NumNodes, s.cd.Generation, s.cd.Status.Conditions)
	meta.SetStatusCondition(&s.status.Conditions, s.resources)
	return true, nil
}

// readMembership reads the domain's daemon pods, labelled nodes, allocated channel claims and
// existing entries, and computes its membership. Only pods controlled by ds count as daemons
// (none while ds is nil: its name is taken). statusOnly says membership lives in status.nodes
// only (cliques off).
func (r *Reconciler) readMembership(ctx context.Context, cd *cdv1beta1.ComputeDomain, ds *appsv1.DaemonSet, statusOnly bool) (membership.Result, error) {
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

// writeStatus applies s.status when it differs from what the domain holds. With cliques, where
// the daemons never wait for the status, a large domain's status rests after each write (see
// pacer): a status that says the same of the domain as a whole as it says now is written when
// the rest ends, by a pass asked for then.
func (r *Reconciler) writeStatus(ctx context.Context, s *scope) error {
	cd, st := s.cd, s.status
	if equality.Semantic.DeepEqual(cd.Status, st) {
		return nil
	}
	if s.useCliques && st.Status == cd.Status.Status {
		if wait := r.pacer.statusWait(s.key); wait > 0 {
			s.requeueAfter(wait)
			return nil
		}
	}
	if ok, err := r.domainOwnedOnServer(ctx, cd); !ok || err != nil {
		return err
	}
	start := r.pacer.clock()
	ac := StatusApply(cd, st)
	if err := r.client.Status().Apply(ctx, ac, client.FieldOwner(r.opts.FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("writing status: %w", err)
	}
	r.pacer.wroteStatus(s.key, start)
	ctrl.LoggerFrom(ctx).V(1).Info("Wrote status", "status", st.Status,
		"readyNodes", st.ReadyNodes, "totalNodes", st.TotalNodes)
	return nil
}
