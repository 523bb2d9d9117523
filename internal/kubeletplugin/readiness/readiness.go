// Package readiness is the kubelet plugin's view of ComputeDomains and their cliques on a watch
// cache (View): whether a claim's domain exists, and whether the node's IMEX daemon of the domain
// is Ready (DaemonReady), waited for on the cache's changes.
package readiness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin/failure"
	"cdplane/internal/scheme"
)

// uidIndex indexes ComputeDomains by UID in the plugin's cache.
const uidIndex = "metadata.uid"

// DaemonReady is the readiness rule of step 2 of a channel prepare: the node's daemon is Ready
// when the node has an entry with status Ready in its clique (when it has one and the clique
// object exists) or in the domain's status.nodes (domains kept without cliques, fabric-less
// nodes, and the aggregate while the ComputeDomainCliques gate flips). Both places are read so
// that flipping the gate never makes a Ready node look not ready. When not Ready, the reason
// says what was seen.
func DaemonReady(node string, clique *cdv1beta1.ComputeDomainClique, cd *cdv1beta1.ComputeDomain) (bool, string) {
	inClique := ""
	if clique != nil {
		for _, d := range clique.Daemons {
			if d.NodeName == node {
				if d.Status == cdv1beta1.StatusReady {
					return true, ""
				}
				inClique = fmt.Sprintf("clique %s lists the node as %s", clique.Name, statusOrUnknown(d.Status))
			}
		}
		if inClique == "" {
			inClique = fmt.Sprintf("clique %s does not list the node yet", clique.Name)
		}
	}
	inStatus := "ComputeDomain status does not list the node yet"
	if cd != nil {
		for _, n := range cd.Status.Nodes {
			if n.Name == node {
				if n.Status == cdv1beta1.StatusReady {
					return true, ""
				}
				inStatus = "ComputeDomain status lists the node as " + statusOrUnknown(n.Status)
			}
		}
	}
	if inClique != "" {
		return false, inClique + "; " + inStatus
	}
	return false, inStatus
}

func statusOrUnknown(s string) string {
	if s == "" {
		return "without status"
	}
	return s
}

// notifier wakes waiters whenever the watched objects change.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

// changed returns a channel closed at the next change; take it before reading the state so
// that no change is missed.
func (n *notifier) changed() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *notifier) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}

func (n *notifier) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { n.notify() },
		UpdateFunc: func(any, any) { n.notify() },
		DeleteFunc: func(any) { n.notify() },
	}
}

// NewView returns the view of domains and cliques on c (NewCache, not started yet: call Setup
// first), reading from api what the cache does not hold. cachedClique is the clique id whose
// cliques c holds; cliquesHoldEntries and statusFallbackAfter: see View.
func NewView(c cache.Cache, api client.Reader, driverNS, cachedClique string, cliquesHoldEntries bool, statusFallbackAfter time.Duration) *View {
	return &View{cache: c, api: api, driverNS: driverNS, cachedClique: cachedClique, recheck: 5 * time.Second,
		cliquesHoldEntries: cliquesHoldEntries, statusFallbackAfter: statusFallbackAfter, waitingSince: map[string]waiting{}}
}

// View reads ComputeDomains (cluster-wide, by UID; metadata only) and the driver
// namespace's cliques from a watch cache, and wakes readiness waiters on every change.
//
// Only the domains' metadata is watched: a domain's status lists every node (hundreds of KB in
// a large domain) and changes as each of them joins, and every plugin of the cluster watching it whole
// would receive all of it on every change. status.nodes is read from the API instead, by a
// waiter only, when the clique object does not answer (see waitDaemonReady).
type View struct {
	cache    cache.Cache
	api      client.Reader
	driverNS string
	// cachedClique is the clique id whose clique objects the cache holds: the node's clique when
	// the plugin started.
	cachedClique string
	changes      notifier
	// recheck bounds how long a waiter sleeps without a change notification.
	recheck time.Duration
	// cliquesHoldEntries: the plane keeps membership in cliques (ComputeDomainCliques on,
	// daemons run by cdplane), so a node of a clique finds its entry in its clique object.
	// status.nodes is then read only as a fallback, statusFallbackAfter after the node began
	// waiting for the domain (waitingSince, by domain UID, across prepare calls).
	cliquesHoldEntries  bool
	statusFallbackAfter time.Duration
	mu                  sync.Mutex
	waitingSince        map[string]waiting
}

// statusReadInterval says how often a waiter for the node's daemon in domain cdUID may read the
// domain's status.nodes, given the clique object it sees (nil: none), and whether it may at all
// now. With cliques (below) the interval is kept across prepare calls, and the answer is zero
// and whether to read now.
//
// Where the entry is in status.nodes (the plane keeps no cliques, or the node has no fabric),
// every statusReadEvery while no clique object answers, every recheck while one exists that does
// not list the node (a gate flip). Where the plane keeps cliques and the node has one, the entry
// comes in the clique, which the cache watches: a clique that exists is waited for, never the
// status; without one (none of its daemons registered yet, or the controller's gate is off)
// the status is read only once the node has waited statusFallbackAfter, then every quarter of
// that: in a large burst, a status read per waiting node every second (of a domain hundreds of
// KB large) keeps kube-apiserver from answering anything else (docs/scale.md, "Design choices
// and what was measured").
//
// place is the domain's cdv1beta1.MembershipAnnotation, where cdplane's controller says it keeps
// the membership: "status" is read as a plane without cliques; "cliques" means the status is
// never read for a node with a clique; none (another controller) leaves the rules above.
func (v *View) statusReadInterval(cdUID, cliqueID, place string, clique *cdv1beta1.ComputeDomainClique, now time.Time) (time.Duration, bool) {
	if !v.cliquesHoldEntries || cliqueID == "" || place == cdv1beta1.MembershipInStatus {
		if clique != nil {
			return v.recheck, true
		}
		return statusReadEvery, true
	}
	if clique != nil || place == cdv1beta1.MembershipInCliques {
		return 0, false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	w, ok := v.waitingSince[cdUID]
	if !ok {
		w = waiting{since: now}
	}
	may := now.Sub(w.since) >= v.statusFallbackAfter && now.Sub(w.lastRead) >= v.statusFallbackAfter/4
	if may {
		w.lastRead = now
	}
	v.waitingSince[cdUID] = w
	return 0, may
}

// waiting is when a node began waiting for its daemon in a domain, and when it last fell back
// to reading the domain's status.
type waiting struct{ since, lastRead time.Time }

// ready forgets when the node began waiting for the domain's daemon: it is Ready.
func (v *View) ready(cdUID string) {
	v.mu.Lock()
	delete(v.waitingSince, cdUID)
	v.mu.Unlock()
}

// DomainMeta is the cached form of a ComputeDomain.
func DomainMeta() *metav1.PartialObjectMetadata {
	m := scheme.Meta(cdv1beta1.GroupVersion.WithKind("ComputeDomain"))
	return m
}

func domainMetaList() *metav1.PartialObjectMetadataList {
	l := scheme.MetaList(cdv1beta1.GroupVersion.WithKind("ComputeDomainList"))
	return l
}

// Setup registers the UID index and the change handlers; call before the cache starts.
func (v *View) Setup(ctx context.Context) error {
	if err := v.cache.IndexField(ctx, DomainMeta(), uidIndex, func(o client.Object) []string {
		return []string{string(o.GetUID())}
	}); err != nil {
		return fmt.Errorf("indexing ComputeDomains by UID: %w", err)
	}
	for _, obj := range []client.Object{DomainMeta(), &cdv1beta1.ComputeDomainClique{}} {
		inf, err := v.cache.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("informer for %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(v.changes.handler()); err != nil {
			return fmt.Errorf("watching %T: %w", obj, err)
		}
	}
	return nil
}

// Domain returns the metadata of the ComputeDomain with the given UID; not in the cache is a
// retryable error.
func (v *View) Domain(ctx context.Context, uid string) (*metav1.PartialObjectMetadata, error) {
	list := domainMetaList()
	if err := v.cache.List(ctx, list, client.MatchingFields{uidIndex: uid}); err != nil {
		return nil, failure.Retryablef("looking up ComputeDomain %s: %w", uid, err)
	}
	if len(list.Items) == 0 {
		return nil, &failure.RetryableError{Err: &DomainNotFoundError{UID: uid}}
	}
	return &list.Items[0], nil
}

// DomainNotFoundError says that no ComputeDomain with the UID is in the cache.
type DomainNotFoundError struct{ UID string }

func (e *DomainNotFoundError) Error() string {
	return fmt.Sprintf("ComputeDomain with UID %s not found", e.UID)
}

// DomainExists reports whether the cache holds the ComputeDomain with the given UID.
func (v *View) DomainExists(ctx context.Context, uid string) (bool, error) {
	list := domainMetaList()
	if err := v.cache.List(ctx, list, client.MatchingFields{uidIndex: uid}); err != nil {
		return false, fmt.Errorf("looking up ComputeDomain %s: %w", uid, err)
	}
	return len(list.Items) > 0, nil
}

// clique returns the domain's clique object, nil when there is none: from the cache for the
// clique the cache holds, from the API for another (the node's clique was not known when the
// plugin started, or changed since).
func (v *View) clique(ctx context.Context, cdUID, cliqueID string) (*cdv1beta1.ComputeDomainClique, error) {
	if cliqueID == "" {
		return nil, nil
	}
	var r client.Reader = v.cache
	if cliqueID != v.cachedClique {
		r = v.api
	}
	c := &cdv1beta1.ComputeDomainClique{}
	var opts []client.GetOption
	if cliqueID != v.cachedClique {
		opts = append(opts, fromWatchCache)
	}
	err := r.Get(ctx, types.NamespacedName{Namespace: v.driverNS, Name: cdv1beta1.CliqueName(cdUID, cliqueID)}, c, opts...)
	if client.IgnoreNotFound(err) != nil {
		return nil, err
	}
	if err != nil {
		return nil, nil
	}
	return c, nil
}

// fromWatchCache serves a read from the apiserver's watch cache (resourceVersion "0") rather than
// a quorum read from etcd: a waiter polls, so a version a moment old does no harm, and at a
// thousand nodes quorum reads of a domain's status (hundreds of KB, decoded by the apiserver on
// each read) were a large share of the apiserver's work.
var fromWatchCache = &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: "0"}}

// statusReadEvery is how often a waiter reads the domain's status from the API where
// status.nodes is the answer (see statusReadInterval).
const statusReadEvery = time.Second

// WaitDaemonReady waits until DaemonReady holds for the node, waking on the cache's changes
// (and every recheck), until ctx ends; then it returns a *failure.RetryableError with the last reason.
// The clique comes from the cache; the domain's status.nodes from the API, when needed (see
// View).
func (v *View) WaitDaemonReady(ctx context.Context, cdUID, cliqueID, node string) error {
	start := time.Now()
	var statusReadAt time.Time
	for {
		changed := v.changes.changed()
		meta, err := v.Domain(ctx, cdUID)
		if err != nil && ctx.Err() != nil {
			return err
		}
		reason := ""
		if err == nil {
			clique, err := v.clique(ctx, cdUID, cliqueID)
			if err != nil {
				return failure.Retryablef("reading clique of ComputeDomain %s: %w", cdUID, err)
			}
			var ready bool
			if ready, reason = DaemonReady(node, clique, nil); ready {
				v.ready(cdUID)
				return nil
			}
			every, may := v.statusReadInterval(cdUID, cliqueID, meta.Annotations[cdv1beta1.MembershipAnnotation], clique, time.Now())
			if may && (clique == nil || !listsNode(clique, node)) && time.Since(statusReadAt) >= every {
				statusReadAt = time.Now()
				cd := &cdv1beta1.ComputeDomain{}
				if err := v.api.Get(ctx, client.ObjectKeyFromObject(meta), cd, fromWatchCache); err != nil {
					if ctx.Err() == nil {
						reason = fmt.Sprintf("reading ComputeDomain %s/%s: %v", meta.Namespace, meta.Name, err)
					}
				} else if ready, reason = DaemonReady(node, clique, cd); ready {
					v.ready(cdUID)
					return nil
				}
			}
		} else {
			reason = innerMessage(err)
		}
		select {
		case <-changed:
		case <-time.After(v.recheck):
		case <-ctx.Done():
			return failure.Retryablef("the ComputeDomain daemon on node %s is not Ready after %s: %s",
				node, time.Since(start).Round(time.Millisecond), reason)
		}
	}
}

func listsNode(clique *cdv1beta1.ComputeDomainClique, node string) bool {
	for _, d := range clique.Daemons {
		if d.NodeName == node {
			return true
		}
	}
	return false
}

// innerMessage is an error's message without the retryable prefix, for nesting in another.
func innerMessage(err error) string {
	var r *failure.RetryableError
	if errors.As(err, &r) {
		return r.Err.Error()
	}
	return err.Error()
}
