// Package cleanup removes what ComputeDomains that no longer exist left behind: DaemonSets,
// ResourceClaimTemplates and cliques created for them, and node labels naming them. It runs
// once the caches have synced, shortly after a ComputeDomain of the plane is deleted, and
// periodically, on the leader only.
package cleanup

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/computedomain"
	"cdplane/internal/metrics"
	"cdplane/internal/plane"
	"cdplane/internal/scheme"
)

// Defaults of the Cleaner's timing.
const (
	DefaultInterval = 10 * time.Minute
	DefaultDebounce = 2 * time.Second
)

// Cleaner deletes orphans. Cached lists find the candidates; a fresh list of ComputeDomains,
// taken after the candidates were collected, decides, so a domain created meanwhile is kept.
//
// A label proves nothing on its own: a namespaced candidate is trusted only inside a namespace
// the plane owns (its driver namespace, and namespaces labelled for it; for the legacy plane,
// namespaces without the plane label), read fresh, so a tenant's look-alike object elsewhere is
// never touched. One candidate that fails never stops a pass: the pass goes on with the others
// and returns every failure together.
type Cleaner struct {
	Client          client.Client // reads from the cache
	APIReader       client.Reader // reads from the apiserver
	Cache           cache.Cache
	DriverNamespace string
	// Interval is how often a pass runs regardless of events (DefaultInterval when zero).
	Interval time.Duration
	// Debounce is how long after a ComputeDomain's deletion the pass it triggers runs, so that
	// deletions in a burst cost one pass (DefaultDebounce when zero).
	Debounce time.Duration
	// ControlPlaneID is the plane whose objects and nodes are cleaned ("" legacy).
	ControlPlaneID string

	trigger chan struct{}
}

// NeedLeaderElection makes the cleaner run on the leader only.
func (c *Cleaner) NeedLeaderElection() bool { return true }

// Trigger asks for a pass soon (after Debounce); triggers before that pass runs are one.
func (c *Cleaner) Trigger() {
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

// Start runs a pass once the caches have synced, then Debounce after each deletion of a
// ComputeDomain the cache sees (stale node labels go within seconds, not at the next
// interval), and every Interval, until ctx ends.
func (c *Cleaner) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("cleanup")
	ctx = ctrl.LoggerInto(ctx, log)
	c.trigger = make(chan struct{}, 1)
	informer, err := c.Cache.GetInformer(ctx, &cdv1beta1.ComputeDomain{})
	if err != nil {
		return fmt.Errorf("watching ComputeDomain deletions: %w", err)
	}
	reg, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(any) { c.Trigger() }})
	if err != nil {
		return fmt.Errorf("watching ComputeDomain deletions: %w", err)
	}
	defer func() { _ = informer.RemoveEventHandler(reg) }()
	if !c.Cache.WaitForCacheSync(ctx) {
		return nil
	}
	interval := c.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	debounce := c.Debounce
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	periodic := time.NewTicker(interval)
	defer periodic.Stop()
	for {
		if n, err := c.RunOnce(ctx); err != nil {
			log.Error(err, "Cleaning up after deleted ComputeDomains", "objects", n)
		} else if n > 0 {
			log.Info("Cleaned up after deleted ComputeDomains", "objects", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-periodic.C:
		case <-c.trigger:
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(debounce):
			}
			select { // deletions during the debounce are this pass's
			case <-c.trigger:
			default:
			}
		}
	}
}

type candidate struct {
	uid  string
	obj  client.Object // nil for a node label
	node string
}

// RunOnce makes one pass and returns how many objects and labels it removed, and every failure
// of the pass joined: a list that failed, a candidate that could not be checked or removed.
func (c *Cleaner) RunOnce(ctx context.Context) (int, error) {
	cands, errs := c.candidates(ctx)
	if len(cands) == 0 {
		return 0, errors.Join(errs...)
	}

	cds := scheme.MetaList(cdv1beta1.GroupVersion.WithKind("ComputeDomainList"))
	if err := c.APIReader.List(ctx, cds); err != nil {
		// Without a fresh list nothing is known to be an orphan: nothing is removed.
		return 0, errors.Join(append(errs, fmt.Errorf("listing ComputeDomains: %w", err))...)
	}
	live := sets.New[string]()
	for _, cd := range cds.Items {
		live.Insert(string(cd.UID))
	}

	p := pass{Cleaner: c, namespaces: map[string]nsVerdict{}}
	removed := 0
	for _, cand := range cands {
		if live.Has(cand.uid) {
			continue
		}
		ok, err := p.remove(ctx, cand)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			removed++
		}
	}
	return removed, errors.Join(errs...)
}

// candidates lists, from the cache, the plane's objects and nodes labelled for a domain. A
// list that fails is reported; the others still give their candidates.
func (c *Cleaner) candidates(ctx context.Context) ([]candidate, []error) {
	var cands []candidate
	var errs []error
	inNS := client.InNamespace(c.DriverNamespace)
	hasLabel := client.HasLabels{cdv1beta1.ComputeDomainLabel}

	dss := &appsv1.DaemonSetList{}
	if err := c.Client.List(ctx, dss, inNS, hasLabel); err != nil {
		errs = append(errs, fmt.Errorf("listing DaemonSets: %w", err))
	}
	for i := range dss.Items {
		cands = c.appendOwned(cands, &dss.Items[i])
	}
	rcts := &resourcev1.ResourceClaimTemplateList{}
	if err := c.Client.List(ctx, rcts, hasLabel); err != nil {
		errs = append(errs, fmt.Errorf("listing ResourceClaimTemplates: %w", err))
	}
	for i := range rcts.Items {
		cands = c.appendOwned(cands, &rcts.Items[i])
	}
	cliques := &cdv1beta1.ComputeDomainCliqueList{}
	if err := c.Client.List(ctx, cliques, inNS, hasLabel); err != nil {
		errs = append(errs, fmt.Errorf("listing cliques: %w", err))
	}
	for i := range cliques.Items {
		cands = c.appendOwned(cands, &cliques.Items[i])
	}
	nodes := scheme.MetaList(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := c.Client.List(ctx, nodes, hasLabel); err != nil {
		errs = append(errs, fmt.Errorf("listing labelled nodes: %w", err))
	}
	for _, n := range nodes.Items {
		// The cache holds the plane's nodes only; a reader that is not scoped (tests) gives
		// others too. Each is checked again on a fresh read before its label goes.
		if plane.Owns(c.ControlPlaneID, n.Labels) {
			cands = append(cands, candidate{uid: n.Labels[cdv1beta1.ComputeDomainLabel], node: n.Name})
		}
	}
	return cands, errs
}

// nsVerdict is what one pass learnt about a namespace: whether the plane owns it, or why that
// could not be told.
type nsVerdict struct {
	owned bool
	err   error
}

// pass is the state of one RunOnce: the namespaces read so far.
type pass struct {
	*Cleaner
	namespaces map[string]nsVerdict
}

// ownsNamespace reports, from a fresh read made once per pass, whether the plane owns the
// namespace. A namespace that cannot be read is not owned, and the error says why.
func (p *pass) ownsNamespace(ctx context.Context, name string) (bool, error) {
	if name == p.DriverNamespace {
		return true, nil
	}
	if v, ok := p.namespaces[name]; ok {
		return v.owned, v.err
	}
	ns := scheme.Meta(corev1.SchemeGroupVersion.WithKind("Namespace"))
	var v nsVerdict
	switch err := p.APIReader.Get(ctx, client.ObjectKey{Name: name}, ns); {
	case apierrors.IsNotFound(err):
	case err != nil:
		v.err = fmt.Errorf("reading namespace %s: %w", name, err)
	default:
		v.owned = plane.Owns(p.ControlPlaneID, ns.Labels)
	}
	p.namespaces[name] = v
	return v.owned, v.err
}

// remove removes one orphan candidate, after checking on fresh reads that it is the plane's:
// in a namespace the plane owns, and still created by the plane's controller for that domain.
// It reports whether it removed something.
func (p *pass) remove(ctx context.Context, cand candidate) (bool, error) {
	log := ctrl.LoggerFrom(ctx)
	if cand.obj == nil {
		if err := computedomain.RemoveNodeLabel(ctx, p.Client, p.APIReader, p.ControlPlaneID, cand.node, cand.uid); err != nil {
			return false, err
		}
		return true, nil
	}
	kind := fmt.Sprintf("%T", cand.obj)[1:]
	owned, err := p.ownsNamespace(ctx, cand.obj.GetNamespace())
	if err != nil {
		return false, fmt.Errorf("checking the namespace of %s %s: %w", kind, klog.KObj(cand.obj), err)
	}
	if !owned {
		// A tenant can label anything in its own namespace: outside the plane's namespaces the
		// labels prove nothing, and the object is not even re-read.
		metrics.ForeignRefusals.WithLabelValues(p.ControlPlaneID, kind).Inc()
		log.V(1).Info("Ignoring an object labelled for this control plane in a namespace it does not own",
			"kind", kind, "object", klog.KObj(cand.obj), "computeDomain", cand.uid)
		return false, nil
	}
	// Re-check on a fresh read right before deleting: the object must still be one this
	// plane's controller created.
	fresh := cand.obj.DeepCopyObject().(client.Object)
	if err := p.APIReader.Get(ctx, client.ObjectKeyFromObject(cand.obj), fresh); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("re-reading %s %s: %w", kind, klog.KObj(cand.obj), err)
	}
	if !p.owned(fresh) || fresh.GetLabels()[cdv1beta1.ComputeDomainLabel] != cand.uid {
		return false, nil
	}
	uid := fresh.GetUID()
	err = p.Client.Delete(ctx, cand.obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("deleting %s %s: %w", kind, klog.KObj(cand.obj), err)
	}
	log.V(1).Info("Deleted orphan", "object", klog.KObj(cand.obj), "computeDomain", cand.uid)
	return true, nil
}

func (c *Cleaner) owned(obj client.Object) bool {
	return computedomain.CreatedByController(obj.GetLabels()) && plane.Owns(c.ControlPlaneID, obj.GetLabels())
}

func (c *Cleaner) appendOwned(cands []candidate, obj client.Object) []candidate {
	if !c.owned(obj) {
		return cands
	}
	return append(cands, candidate{uid: obj.GetLabels()[cdv1beta1.ComputeDomainLabel], obj: obj})
}
