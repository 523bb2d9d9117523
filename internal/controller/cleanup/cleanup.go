// Package cleanup removes what ComputeDomains that no longer exist left behind: DaemonSets,
// ResourceClaimTemplates and cliques created for them, and node labels naming them. It runs
// once the caches have synced, then periodically, on the leader only.
package cleanup

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/computedomain"
	"cdplane/internal/plane"
)

// Cleaner deletes orphans. Cached lists find the candidates; a fresh list of ComputeDomains,
// taken after the candidates were collected, decides, so a domain created meanwhile is kept.
type Cleaner struct {
	Client          client.Client // reads from the cache
	APIReader       client.Reader // reads from the apiserver
	Cache           cache.Cache
	DriverNamespace string
	Interval        time.Duration
	// ControlPlaneID is the plane whose objects and nodes are cleaned ("" legacy).
	ControlPlaneID string
}

// NeedLeaderElection makes the cleaner run on the leader only.
func (c *Cleaner) NeedLeaderElection() bool { return true }

// Start runs a pass once the caches have synced and then every Interval until ctx ends.
func (c *Cleaner) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("cleanup")
	ctx = ctrl.LoggerInto(ctx, log)
	if !c.Cache.WaitForCacheSync(ctx) {
		return nil
	}
	interval := c.Interval
	if interval <= 0 {
		interval = 10 * time.Minute
	}
	for {
		if n, err := c.RunOnce(ctx); err != nil {
			log.Error(err, "Cleaning up after deleted ComputeDomains")
		} else if n > 0 {
			log.Info("Cleaned up after deleted ComputeDomains", "objects", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

type candidate struct {
	uid  string
	obj  client.Object // nil for a node label
	node string
}

// RunOnce makes one pass and returns how many objects and labels it removed.
func (c *Cleaner) RunOnce(ctx context.Context) (int, error) {
	var cands []candidate
	inNS := client.InNamespace(c.DriverNamespace)
	hasLabel := client.HasLabels{cdv1beta1.ComputeDomainLabel}

	dss := &appsv1.DaemonSetList{}
	if err := c.Client.List(ctx, dss, inNS, hasLabel); err != nil {
		return 0, fmt.Errorf("listing DaemonSets: %w", err)
	}
	for i := range dss.Items {
		cands = c.appendOwned(cands, &dss.Items[i])
	}
	rcts := &resourcev1.ResourceClaimTemplateList{}
	if err := c.Client.List(ctx, rcts, hasLabel); err != nil {
		return 0, fmt.Errorf("listing ResourceClaimTemplates: %w", err)
	}
	for i := range rcts.Items {
		cands = c.appendOwned(cands, &rcts.Items[i])
	}
	cliques := &cdv1beta1.ComputeDomainCliqueList{}
	if err := c.Client.List(ctx, cliques, inNS, hasLabel); err != nil {
		return 0, fmt.Errorf("listing cliques: %w", err)
	}
	for i := range cliques.Items {
		cands = c.appendOwned(cands, &cliques.Items[i])
	}
	nodes := &metav1.PartialObjectMetadataList{}
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := c.Client.List(ctx, nodes, hasLabel); err != nil {
		return 0, fmt.Errorf("listing labelled nodes: %w", err)
	}
	for _, n := range nodes.Items {
		cands = append(cands, candidate{uid: n.Labels[cdv1beta1.ComputeDomainLabel], node: n.Name})
	}
	if len(cands) == 0 {
		return 0, nil
	}

	cds := &metav1.PartialObjectMetadataList{}
	cds.SetGroupVersionKind(cdv1beta1.GroupVersion.WithKind("ComputeDomainList"))
	if err := c.APIReader.List(ctx, cds); err != nil {
		return 0, fmt.Errorf("listing ComputeDomains: %w", err)
	}
	live := sets.New[string]()
	for _, cd := range cds.Items {
		live.Insert(string(cd.UID))
	}

	removed := 0
	for _, cand := range cands {
		if live.Has(cand.uid) {
			continue
		}
		if cand.obj == nil {
			if err := computedomain.RemoveNodeLabel(ctx, c.Client, c.APIReader, c.ControlPlaneID, cand.node, cand.uid); err != nil {
				return removed, err
			}
			removed++
			continue
		}
		// Re-check on a fresh read right before deleting: the object must still be one this
		// plane's controller created.
		fresh := cand.obj.DeepCopyObject().(client.Object)
		if err := c.APIReader.Get(ctx, client.ObjectKeyFromObject(cand.obj), fresh); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return removed, fmt.Errorf("re-reading %s: %w", klog.KObj(cand.obj), err)
		}
		if !c.owned(fresh) || fresh.GetLabels()[cdv1beta1.ComputeDomainLabel] != cand.uid {
			continue
		}
		uid := fresh.GetUID()
		err := c.Client.Delete(ctx, cand.obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err != nil && !apierrors.IsNotFound(err) {
			return removed, fmt.Errorf("deleting %T %s: %w", cand.obj, klog.KObj(cand.obj), err)
		}
		ctrl.LoggerFrom(ctx).V(1).Info("Deleted orphan", "object", klog.KObj(cand.obj), "computeDomain", cand.uid)
		removed++
	}
	return removed, nil
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
