package claims

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"cdplane/internal/kubeletplugin/cdi"
)

// sweepStale removes what no live claim needs any more, as the kubelet's unprepare would have:
//   - a checkpoint entry (prepared, being prepared, or aborted) whose ResourceClaim no longer
//     exists, or exists with another UID: a claim cannot be deleted while a pod reserves it, so
//     nothing on the node uses it. Such entries are left when the kubelet lost its own state
//     (a node reinstalled, the kubelet's checkpoint removed) or when an unprepare never came
//     (an unreadable checkpoint kept aside, a plugin that was down when the pod went). Each is
//     undone under the claim's lock and opMu, exactly as an unprepare.
//   - a CDI spec of this plugin's naming whose claim the checkpoint does not hold (an
//     unreadable checkpoint kept aside forgot it).
//
// Entries without a claim name (taken over from a checkpoint that did not record it) are left
// to the kubelet. It returns how many entries and specs it removed.
func (s *State) sweepStale(ctx context.Context) (entries, specs int, _ error) {
	logger := klog.FromContext(ctx)
	var errs []error
	for uid, e := range s.cp.Snapshot() {
		if e.Name == "" {
			continue
		}
		claim := &resourcev1.ResourceClaim{}
		err := s.api.Get(ctx, types.NamespacedName{Namespace: e.Namespace, Name: e.Name}, claim)
		switch {
		case err == nil && claim.UID == uid:
			continue
		case err != nil && !apierrors.IsNotFound(err):
			errs = append(errs, fmt.Errorf("checking claim %s/%s: %w", e.Namespace, e.Name, err))
			continue
		}
		release := s.locks.Unprepare(uid)
		s.opMu.Lock()
		err = s.unprepareClaim(ctx, uid)
		s.opMu.Unlock()
		release()
		if err != nil {
			errs = append(errs, fmt.Errorf("removing claim %s/%s, which no longer exists: %w", e.Namespace, e.Name, err))
			continue
		}
		entries++
		logger.Info("Removed a claim the node still held whose ResourceClaim is gone", "claim", klog.KRef(e.Namespace, e.Name),
			"claimUID", uid, "state", e.State, "kind", e.Kind)
	}
	if s.swept != nil {
		s.swept(s.cp.Snapshot())
	}

	s.opMu.Lock()
	specs, err := s.sweepCDISpecs(ctx)
	s.opMu.Unlock()
	if err != nil {
		errs = append(errs, err)
	}
	return entries, specs, errors.Join(errs...)
}

// sweepCDISpecs removes the CDI specs named as this plugin names a claim's spec (cdi.SpecName)
// whose claim UID is not in the checkpoint. Called with opMu held: a prepare writes its entry
// before its spec, under opMu.
func (s *State) sweepCDISpecs(ctx context.Context) (int, error) {
	files, err := os.ReadDir(s.cfg.CDIRoot)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the CDI directory %s: %w", s.cfg.CDIRoot, err)
	}
	const marker = "@"
	probe := cdi.SpecName(marker)
	prefix, suffix, _ := strings.Cut(probe, marker)
	known := s.cp.Snapshot()
	removed := 0
	var errs []error
	for _, f := range files {
		name := f.Name()
		if f.IsDir() || !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, suffix) || len(name) <= len(prefix)+len(suffix) {
			continue
		}
		uid := types.UID(strings.TrimSuffix(strings.TrimPrefix(name, prefix), suffix))
		if _, ok := known[uid]; ok {
			continue
		}
		if err := s.cdi.Remove(name); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
		klog.FromContext(ctx).Info("Removed the CDI spec of a claim this node does not hold", "spec", name, "claimUID", uid)
	}
	return removed, errors.Join(errs...)
}

// RunStaleSweeps sweeps (sweepStale) every interval until ctx ends.
func (s *State) RunStaleSweeps(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, _, err := s.sweepStale(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Sweeping stale claims and CDI specs (trying again next time)")
		}
	}
}
