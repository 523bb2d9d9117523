package claims

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"cdplane/internal/kubeletplugin/cdi"
	"cdplane/internal/kubeletplugin/checkpoint"
	"cdplane/internal/kubeletplugin/devices"
	"cdplane/internal/kubeletplugin/failure"
)

// Unprepare unprepares the claim (unprepareClaim) under the claim's lock and opMu, after
// stopping and waiting for a prepare of the same claim in progress (see claimlock.Locks).
func (s *State) Unprepare(ctx context.Context, uid types.UID) error {
	release := s.locks.Unprepare(uid)
	s.opMu.Lock()
	err := s.unprepareClaim(ctx, uid)
	s.opMu.Unlock()
	release()
	return err
}

// unprepareClaim undoes a claim's prepare and forgets it. It is idempotent: a claim the plugin
// does not know is done already, and one marked checkpoint.PrepareAborted was undone when the plugin
// started, so only its entry goes.
func (s *State) unprepareClaim(ctx context.Context, uid types.UID) error {
	e, ok := s.cp.Get(uid)
	if !ok {
		return nil
	}
	if e.State != checkpoint.PrepareAborted {
		if err := s.undo(ctx, uid, e); err != nil {
			return err
		}
	}
	return s.cp.Remove(uid)
}

// undo reverses what a prepare of the claim may have done, whether it completed or not: the
// CDI spec goes; a channel claim's node label goes when it is ours and no other claim of the
// domain needs it. A daemon claim's domain config directory stays: a replacement daemon pod's
// prepare may already have written into it (the old pod's unprepare can come after the new
// pod's prepare); it goes with its domain (sweepDomainDirs).
func (s *State) undo(ctx context.Context, uid types.UID, e checkpoint.ClaimEntry) error {
	// The entry's spec is another file when NVIDIA's plugin prepared the claim.
	for _, spec := range []string{cdi.SpecName(uid), e.CDISpec} {
		if err := s.cdi.Remove(spec); err != nil {
			return err
		}
	}
	if devices.DeviceKind(e.Kind) == devices.KindChannel {
		if err := s.label.RemoveDomain(ctx, e.DomainID, uid, s.cp.Snapshot()); err != nil {
			return failure.Tag(failure.NodeLabel, fmt.Errorf("removing the node's ComputeDomain label: %w", err))
		}
	}
	return nil
}

// SweepDomainDirs is sweepDomainDirs under opMu.
func (s *State) SweepDomainDirs(ctx context.Context) error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	return s.sweepDomainDirs(ctx)
}

// sweepDomainDirs removes the config directories of domains that are gone: not in the watch
// cache, and no claim of theirs prepared or being prepared here. Called with opMu held, at
// start and when a domain is deleted.
func (s *State) sweepDomainDirs(ctx context.Context) error {
	root := filepath.Join(s.cfg.StateDir, "domains")
	dirs, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", root, err)
	}
	inUse := map[string]bool{}
	for _, e := range s.cp.Snapshot() {
		if e.State != checkpoint.PrepareAborted {
			inUse[e.DomainID] = true
		}
	}
	var errs []error
	for _, dir := range dirs {
		uid := dir.Name()
		if inUse[uid] {
			continue
		}
		exists, err := s.view.DomainExists(ctx, uid)
		if err != nil || exists {
			errs = append(errs, err)
			continue
		}
		if err := os.RemoveAll(filepath.Join(root, uid)); err != nil {
			errs = append(errs, fmt.Errorf("removing the config directory of ComputeDomain %s: %w", uid, err))
			continue
		}
		klog.FromContext(ctx).V(1).Info("Removed the config directory of a deleted ComputeDomain", "uid", uid)
	}
	return errors.Join(errs...)
}

// Recover runs before the plugin serves: every claim left checkpoint.PrepareStarted by a previous run
// whose ResourceClaim no longer exists (or was replaced by one with another UID) is undone and
// marked checkpoint.PrepareAborted; one that still exists is left for the kubelet to prepare again or
// unprepare.
func (s *State) Recover(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	for uid, e := range s.cp.Snapshot() {
		if e.State != checkpoint.PrepareStarted {
			continue
		}
		if e.Name == "" { // taken over from a checkpoint that did not record it: the kubelet decides
			logger.Info("Claim was being prepared when the plugin stopped and its name is not known; leaving it to the kubelet", "claimUID", uid)
			continue
		}
		claim := &resourcev1.ResourceClaim{}
		key := types.NamespacedName{Namespace: e.Namespace, Name: e.Name}
		err := untilDefinite(ctx, "Reading a claim left PrepareStarted", time.Second, func() error {
			return s.api.Get(ctx, key, claim)
		})
		switch {
		case err == nil && claim.UID == uid:
			logger.Info("Claim was being prepared when the plugin stopped; leaving it to the kubelet",
				"claim", klog.KRef(e.Namespace, e.Name), "claimUID", uid)
			continue
		case err != nil && !apierrors.IsNotFound(err):
			return fmt.Errorf("checking claim %s/%s left PrepareStarted: %w", e.Namespace, e.Name, err)
		}
		if err := s.undo(ctx, uid, e); err != nil {
			return fmt.Errorf("aborting claim %s/%s: %w", e.Namespace, e.Name, err)
		}
		e.State = checkpoint.PrepareAborted
		if err := s.cp.Put(uid, e); err != nil {
			return err
		}
		logger.Info("Claim left PrepareStarted is gone: unprepared it and marked it aborted",
			"claim", klog.KRef(e.Namespace, e.Name), "claimUID", uid)
	}
	return nil
}

// maxDefiniteWait bounds the wait between two tries of untilDefinite.
const maxDefiniteWait = 30 * time.Second

// untilDefinite calls get until it succeeds or fails with NotFound (an answer either way),
// trying again after other errors (throttling, a timed-out TLS handshake, the apiserver
// restarting): first after first, then after twice as long each time, at most maxDefiniteWait
// (a wait.Backoff), logging each error. It returns the last error, wrapped with ctx's, when ctx
// ends first. At start, under a large burst, one such error would make restarted plugins exit,
// restart and fail again in a loop (CrashLoopBackOff); they wait instead, as for their caches,
// within the startup probe's time.
func untilDefinite(ctx context.Context, what string, first time.Duration, get func() error) error {
	backoff := definiteBackoff(first)
	for {
		err := get()
		if err == nil || apierrors.IsNotFound(err) {
			return err
		}
		after := backoff.Step()
		klog.FromContext(ctx).Error(err, what+"; trying again", "after", after)
		t := time.NewTimer(after)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (then: %w)", err, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// definiteBackoff is untilDefinite's backoff: first, then twice as long each time, at most
// maxDefiniteWait, without end.
func definiteBackoff(first time.Duration) wait.Backoff {
	return wait.Backoff{Duration: first, Factor: 2, Cap: maxDefiniteWait, Steps: math.MaxInt32}
}
