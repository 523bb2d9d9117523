package kubeletplugin

import (
	"context"
	"fmt"
	"os"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	draplugin "k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
)

// UnprepareResourceClaims unprepares each claim (see unprepareClaim), after stopping and
// waiting for a prepare of the same claim in progress (see claimLocks).
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []draplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		logger := klog.FromContext(ctx).WithValues("claim", c.NamespacedName, "claimUID", c.UID)
		release := d.claims.unprepare(c.UID)
		d.opMu.Lock()
		err := d.unprepareClaim(klog.NewContext(ctx, logger), c.UID)
		d.opMu.Unlock()
		release()
		if err != nil {
			logger.Error(err, "Unpreparing claim failed")
			err = fmt.Errorf("claim %s: %w", c.NamespacedName, err)
		}
		out[c.UID] = err
	}
	return out, nil
}

// unprepareClaim undoes a claim's prepare and forgets it. It is idempotent: a claim the plugin
// does not know is done already, and one marked PrepareAborted was undone when the plugin
// started, so only its entry goes.
func (d *Driver) unprepareClaim(ctx context.Context, uid types.UID) error {
	e, ok := d.cp.get(uid)
	if !ok {
		return nil
	}
	if e.State != PrepareAborted {
		if err := d.undo(ctx, uid, e); err != nil {
			return err
		}
	}
	return d.cp.remove(uid)
}

// undo reverses what a prepare of the claim may have done, whether it completed or not: the
// CDI spec goes; a channel claim's node label goes when it is ours and no other claim of the
// domain needs it; a daemon claim's domain config directory goes.
func (d *Driver) undo(ctx context.Context, uid types.UID, e ClaimEntry) error {
	if err := d.cdi.remove(CDISpecName(uid)); err != nil {
		return err
	}
	switch DeviceKind(e.Kind) {
	case KindChannel:
		if err := d.label.removeDomain(ctx, e.DomainID, uid, d.cp.snapshot()); err != nil {
			return fmt.Errorf("removing the node's ComputeDomain label: %w", err)
		}
	case KindDaemon:
		if err := os.RemoveAll(d.domainConfigDir(e.DomainID)); err != nil {
			return fmt.Errorf("removing the domain's config directory: %w", err)
		}
	}
	return nil
}

// recover runs before the plugin serves: every claim left PrepareStarted by a previous run
// whose ResourceClaim no longer exists (or was replaced by one with another UID) is undone and
// marked PrepareAborted; one that still exists is left for the kubelet to prepare again or
// unprepare.
func (d *Driver) recover(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	for uid, e := range d.cp.snapshot() {
		if e.State != PrepareStarted {
			continue
		}
		claim := &resourcev1.ResourceClaim{}
		err := d.api.Get(ctx, types.NamespacedName{Namespace: e.Namespace, Name: e.Name}, claim)
		switch {
		case err == nil && claim.UID == uid:
			logger.Info("Claim was being prepared when the plugin stopped; leaving it to the kubelet",
				"claim", klog.KRef(e.Namespace, e.Name), "claimUID", uid)
			continue
		case err != nil && !apierrors.IsNotFound(err):
			return fmt.Errorf("checking claim %s/%s left PrepareStarted: %w", e.Namespace, e.Name, err)
		}
		if err := d.undo(ctx, uid, e); err != nil {
			return fmt.Errorf("aborting claim %s/%s: %w", e.Namespace, e.Name, err)
		}
		e.State = PrepareAborted
		if err := d.cp.put(uid, e); err != nil {
			return err
		}
		logger.Info("Claim left PrepareStarted is gone: unprepared it and marked it aborted",
			"claim", klog.KRef(e.Namespace, e.Name), "claimUID", uid)
	}
	return nil
}
