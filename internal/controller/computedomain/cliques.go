package computedomain

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/membership"
	"cdplane/internal/scheme"
)

// cliqueWriters bounds the concurrent clique writes of one reconcile.
const cliqueWriters = 64

// listCliquesAbove is how many changed cliques a pass reads one by one before it reads them all
// in one list instead.
const listCliquesAbove = 4

// listCliques returns the domain's cliques from the cache, once it shows this controller's own
// writes of cliques (see NewClient). They are the cache's own objects, not copies (shallow copies
// of them): callers only read them.
func (r *Reconciler) listCliques(ctx context.Context, cd *cdv1beta1.ComputeDomain) ([]cdv1beta1.ComputeDomainClique, error) {
	list := &cdv1beta1.ComputeDomainCliqueList{}
	if err := r.client.List(ctx, list, client.InNamespace(r.opts.DriverNamespace),
		client.MatchingLabels{cdv1beta1.ComputeDomainLabel: string(cd.UID)}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing cliques: %w", err)
	}
	return list.Items, nil
}

// writeCliques applies each clique whose entries changed and deletes cliques left empty. With
// mayHold (the domain is not turning Ready in this pass), a change that only turns entries Ready
// may be held in a large domain (see pacer): it returns how long until the first held one is due
// (0: none held).
func (r *Reconciler) writeCliques(ctx context.Context, key types.NamespacedName, cd *cdv1beta1.ComputeDomain, ds *appsv1.DaemonSet, res membership.Result, mayHold bool) (time.Duration, error) {
	if ds == nil {
		return 0, nil // no DaemonSet to own them yet: nothing can be running
	}
	existing, err := r.listCliques(ctx, cd)
	if err != nil {
		return 0, err
	}
	var held time.Duration
	current := map[string]*cdv1beta1.ComputeDomainClique{}
	for i := range existing {
		current[existing[i].Name] = &existing[i]
	}
	keep := sets.New[string]()
	var changed []*cdv1beta1.ComputeDomainClique
	unknown := 0 // changed cliques this controller does not know as its own
	for cliqueID, entries := range res.Cliques {
		desired := r.clique(cd, ds, cliqueID, entries)
		keep.Insert(desired.Name)
		cur, ok := current[desired.Name]
		if ok && cliqueUpToDate(cur, desired) {
			continue
		}
		if ok && mayHold && onlyTurnsReady(cur, desired) {
			if wait := r.pacer.holdReady(key, desired.Name); wait > 0 {
				if held == 0 || wait < held {
					held = wait
				}
				continue
			}
		}
		if knownClique(cur) == nil {
			unknown++
		}
		changed = append(changed, desired)
	}
	// A clique is written only where the apiserver holds no object of its name that this plane
	// did not create for the domain (the cache is scoped to this plane's labels and cannot show a
	// foreign object of the same name). One the controller knows as its own, at a version (the
	// cache's copy, which carries this plane's labels), is written on
	// the condition that the apiserver still holds that object at that version (its UID and
	// resourceVersion in the apply): the check and the write are one request. Any other is read
	// fresh first; a pass writing many reads them all in one list of the driver namespace, not
	// one GET each (only their metadata: whose they are is all the check needs).
	var onServer map[string]*metav1.PartialObjectMetadata
	if unknown > listCliquesAbove {
		list := scheme.MetaList(cdv1beta1.GroupVersion.WithKind("ComputeDomainCliqueList"))
		if err := r.reader.List(ctx, list, client.InNamespace(r.opts.DriverNamespace)); err != nil {
			return 0, fmt.Errorf("re-reading cliques: %w", err)
		}
		onServer = make(map[string]*metav1.PartialObjectMetadata, len(list.Items))
		for i := range list.Items {
			onServer[list.Items[i].Name] = &list.Items[i]
		}
	}
	// Cliques are independent objects: write the changed ones concurrently, so that a large
	// domain's pass costs a few round trips rather than one per clique.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cliqueWriters)
	for _, c := range changed {
		cur := current[c.Name] // nil for a new clique
		g.Go(func() error {
			wrote, err := r.applyClique(gctx, c, knownClique(cur), onServer)
			if err != nil {
				return err
			}
			if wrote {
				r.pacer.wroteClique(key, c.Name)
				if r.opts.CliqueWritten != nil {
					r.opts.CliqueWritten(c)
				}
			}
			ctrl.LoggerFrom(ctx).V(1).Info("Wrote clique", "clique", klog.KObj(c), "daemons", len(c.Daemons))
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return held, r.deleteCliques(ctx, cd, existing, keep)
}

// knownClique returns cur, the clique as this controller knows it (listCliques), when it can be
// written on its version: it has a UID and a resourceVersion. Otherwise, and for a nil cur, nil.
func knownClique(cur *cdv1beta1.ComputeDomainClique) *cdv1beta1.ComputeDomainClique {
	if cur == nil || cur.UID == "" || cur.ResourceVersion == "" {
		return nil
	}
	return cur
}

func (r *Reconciler) clique(cd *cdv1beta1.ComputeDomain, ds *appsv1.DaemonSet, cliqueID string, entries []membership.Entry) *cdv1beta1.ComputeDomainClique {
	labels := r.ownedLabels(cd)
	labels[cdv1beta1.CliqueIDLabel] = cliqueID
	return &cdv1beta1.ComputeDomainClique{
		TypeMeta: metav1.TypeMeta{APIVersion: cdv1beta1.GroupVersion.String(), Kind: "ComputeDomainClique"},
		ObjectMeta: metav1.ObjectMeta{
			Name: cdv1beta1.CliqueName(string(cd.UID), cliqueID), Namespace: r.opts.DriverNamespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Daemons:      entries,
		ReadyDaemons: int32(countReady(entries)),
		TotalDaemons: int32(len(entries)),
	}
}

// countReady counts the Ready entries.
func countReady(entries []membership.Entry) int {
	n := 0
	for _, e := range entries {
		if e.Status == cdv1beta1.StatusReady {
			n++
		}
	}
	return n
}

// onlyTurnsReady reports whether desired differs from cur, its clique as written, only in
// entries turning Ready: the same labels, owners and nodes, each with the same address, clique
// and index, and no entry that was Ready not Ready now.
func onlyTurnsReady(cur, desired *cdv1beta1.ComputeDomainClique) bool {
	if len(cur.Daemons) != len(desired.Daemons) || !cliqueMetaUpToDate(cur, desired) {
		return false
	}
	for i := range desired.Daemons {
		was, is := cur.Daemons[i], desired.Daemons[i]
		if was.Status == cdv1beta1.StatusReady && is.Status != cdv1beta1.StatusReady {
			return false
		}
		was.Status, is.Status = "", ""
		if was != is {
			return false
		}
	}
	return true
}

// cliqueMetaUpToDate reports whether cur carries desired's labels and owners.
func cliqueMetaUpToDate(cur, desired *cdv1beta1.ComputeDomainClique) bool {
	for k, v := range desired.Labels {
		if cur.Labels[k] != v {
			return false
		}
	}
	return equality.Semantic.DeepEqual(cur.OwnerReferences, desired.OwnerReferences)
}

func cliqueUpToDate(cur, desired *cdv1beta1.ComputeDomainClique) bool {
	return cliqueMetaUpToDate(cur, desired) &&
		equality.Semantic.DeepEqual(cur.Daemons, desired.Daemons) &&
		cur.ReadyDaemons == desired.ReadyDaemons && cur.TotalDaemons == desired.TotalDaemons
}

// applyClique writes c unless the apiserver holds an object of its name that was not created for
// its domain by this plane. known is the clique as this controller knows it (its own), or nil.
// With known, c is written only if the apiserver still holds known's UID at known's
// resourceVersion, and otherwise (someone else wrote it since, or it is gone) checked as an
// unknown one. For an unknown one, onServer is the driver namespace's cliques as just listed
// from the apiserver, or nil: then c is read fresh by itself. It reports whether it wrote c, and
// then sets c's UID and resourceVersion from the apiserver's answer.
func (r *Reconciler) applyClique(ctx context.Context, c *cdv1beta1.ComputeDomainClique, known *cdv1beta1.ComputeDomainClique, onServer map[string]*metav1.PartialObjectMetadata) (bool, error) {
	if known != nil {
		ac := cliqueApply(c).WithUID(known.UID).WithResourceVersion(known.ResourceVersion)
		err := r.client.Apply(ctx, ac, client.FieldOwner(r.opts.FieldManager), client.ForceOwnership)
		if err == nil {
			c.UID, c.ResourceVersion = ptr.Deref(ac.UID, ""), ptr.Deref(ac.ResourceVersion, "")
			return true, nil
		}
		// A resourceVersion that is not the object's (changed, replaced or deleted since) is a
		// conflict, whatever is there now.
		if !apierrors.IsConflict(err) {
			return false, fmt.Errorf("writing clique %s: %w", c.Name, err)
		}
		ctrl.LoggerFrom(ctx).V(1).Info("A clique changed on the server since this controller knew it; reading it again", "clique", klog.KObj(c), "reason", err.Error())
		onServer = nil
	}
	if onServer == nil {
		if ok, err := r.ownedOnServer(ctx, &cdv1beta1.ComputeDomainClique{}, client.ObjectKeyFromObject(c), c.Labels[cdv1beta1.ComputeDomainLabel], true); !ok || err != nil {
			return false, err
		}
	} else if cur, ok := onServer[c.Name]; ok && !r.createdFor(cur.Labels, c.Labels[cdv1beta1.ComputeDomainLabel]) {
		refuse(ctx, r.opts.ControlPlaneID, "v1beta1.ComputeDomainClique", client.ObjectKeyFromObject(c).String())
		return false, nil
	}
	ac := cliqueApply(c)
	if err := r.client.Apply(ctx, ac, client.FieldOwner(r.opts.FieldManager), client.ForceOwnership); err != nil {
		return false, fmt.Errorf("writing clique %s: %w", c.Name, err)
	}
	c.UID, c.ResourceVersion = ptr.Deref(ac.UID, ""), ptr.Deref(ac.ResourceVersion, "")
	return true, nil
}

// deleteCliques deletes the domain's cliques whose names are not in keep. existing is the
// domain's cliques as the pass read them, or nil to read them now (a pass that read them before
// its own clique writes passes them: reading again would wait for the cache to show those
// writes, and no clique it wrote is one it deletes).
func (r *Reconciler) deleteCliques(ctx context.Context, cd *cdv1beta1.ComputeDomain, existing []cdv1beta1.ComputeDomainClique, keep sets.Set[string]) error {
	if existing == nil {
		var err error
		if existing, err = r.listCliques(ctx, cd); err != nil {
			return err
		}
	}
	for i := range existing {
		c := &existing[i]
		if keep.Has(c.Name) {
			continue
		}
		if ok, err := r.ownedOnServer(ctx, &cdv1beta1.ComputeDomainClique{}, client.ObjectKeyFromObject(c), string(cd.UID), false); !ok || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		if err := r.client.Delete(ctx, c, client.Preconditions{UID: &c.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting clique %s: %w", c.Name, err)
		}
		ctrl.LoggerFrom(ctx).V(1).Info("Deleted clique", "clique", klog.KObj(c))
	}
	return nil
}
