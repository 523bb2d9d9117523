package claims

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"cdplane/internal/features"
	"cdplane/internal/kubeletplugin/cdi"
	"cdplane/internal/kubeletplugin/checkpoint"
	"cdplane/internal/kubeletplugin/claimlock"
	"cdplane/internal/kubeletplugin/devices"
	"cdplane/internal/kubeletplugin/failure"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// Prepare prepares the claim (prepareClaim) under the claim's lock and opMu. A prepare stopped
// or refused because an unprepare of the claim came meanwhile fails with a retryable error
// saying so. Each readiness wait ends at deadline.
func (s *State) Prepare(ctx context.Context, claim *resourcev1.ResourceClaim, deadline time.Time) ([]checkpoint.PreparedDevice, error) {
	ctx, release, err := s.locks.Prepare(ctx, claim.UID)
	if err != nil {
		return nil, &failure.RetryableError{Err: err}
	}
	defer release()
	s.opMu.Lock()
	defer s.opMu.Unlock()
	devices, err := s.prepareClaim(ctx, claim, deadline)
	if err != nil && errors.Is(context.Cause(ctx), claimlock.ErrUnpreparedMeanwhile) {
		klog.FromContext(ctx).V(1).Info("Prepare stopped by an unprepare of its claim", "err", err)
		return nil, &failure.RetryableError{Err: claimlock.ErrUnpreparedMeanwhile}
	}
	return devices, err
}

// prepareClaim prepares one claim, idempotently: a claim already checkpoint.PrepareCompleted gets the
// devices recorded for it, as long as its CDI spec is still there (after a reboot the CDI
// directory, a tmpfs, is empty: the claim is prepared again). Otherwise the claim's allocation
// is read and checked (bad configs are permanent errors, before anything changes),
// checkpoint.PrepareStarted is checkpointed, the channel or daemon steps run, and checkpoint.PrepareCompleted is
// checkpointed with the devices.
func (s *State) prepareClaim(ctx context.Context, claim *resourcev1.ResourceClaim, deadline time.Time) ([]checkpoint.PreparedDevice, error) {
	if e, ok := s.cp.Get(claim.UID); ok && e.State == checkpoint.PrepareCompleted {
		if e.CDISpec == "" || s.cdi.Exists(e.CDISpec) {
			return e.Devices, nil
		}
		klog.FromContext(ctx).Info("Prepared claim's CDI spec is gone (the node rebooted, or it was removed): preparing the claim again",
			"claim", klog.KObj(claim), "cdiSpec", e.CDISpec)
	}
	plan, err := planClaim(claim)
	if err != nil {
		return nil, failure.Tag(failure.BadConfig, err)
	}
	// The host driver's files are looked up before anything is written, so that a driver root
	// without them leaves nothing half-prepared.
	var drv devices.DriverFiles
	if plan.Kind == devices.KindDaemon && s.cfg.IMEXMode == features.IMEXHostManaged {
		return nil, failure.Permanentf("claim %s/%s is a ComputeDomain daemon claim, but this node runs IMEX as a host service (--imex-mode=%s): no daemon is prepared here",
			claim.Namespace, claim.Name, features.IMEXHostManaged)
	}
	if plan.Kind == devices.KindDaemon && s.cfg.NvidiaDriverRoot != "" {
		if drv, err = s.cfg.DriverRoot().Locate(); err != nil {
			return nil, failure.Tag(failure.Driver, err)
		}
		kernel, _ := s.cfg.ReadHostFile(devices.DriverVersionFile) // no file: nothing to compare
		if err := s.cfg.DriverRoot().CheckVersion(drv, kernel); err != nil {
			return nil, failure.Tag(failure.Driver, err)
		}
	}
	if plan.Kind == devices.KindDaemon {
		if err := s.checkIMEXNames(); err != nil {
			return nil, failure.Tag(failure.Driver, err)
		}
	}
	if err := preparedElsewhere(s.cp.Snapshot(), claim, plan); err != nil {
		return nil, failure.Tag(failure.DeviceInUse, err)
	}
	if old, ok := s.cp.Get(claim.UID); ok && old.CDISpec != "" && old.CDISpec != cdi.SpecName(claim.UID) {
		// NVIDIA's plugin began this prepare: its spec would define the same CDI devices.
		if err := s.cdi.Remove(old.CDISpec); err != nil {
			return nil, err
		}
	}
	entry := checkpoint.ClaimEntry{State: checkpoint.PrepareStarted, Namespace: claim.Namespace, Name: claim.Name, Kind: string(plan.Kind), DomainID: plan.DomainID}
	if err := s.cp.Put(claim.UID, entry); err != nil {
		return nil, err
	}
	var prepared []checkpoint.PreparedDevice
	var spec string
	switch plan.Kind {
	case devices.KindChannel:
		prepared, spec, err = s.prepareChannel(ctx, claim, plan, deadline)
	case devices.KindDaemon:
		prepared, spec, err = s.prepareDaemon(ctx, claim, plan, drv)
	}
	if err != nil {
		return nil, err
	}
	entry.State, entry.CDISpec, entry.Devices = checkpoint.PrepareCompleted, spec, prepared
	if err := s.cp.Put(claim.UID, entry); err != nil {
		return nil, err
	}
	return prepared, nil
}

// preparedElsewhere refuses to prepare a device that the checkpoint holds as prepared for
// another claim, naming both claims. The scheduler allocates each device to one claim, but a
// stale checkpoint (a claim whose unprepare never came), a claim with admin access, or an
// unprepare racing the scheduler's next allocation would otherwise hand one channel, or the
// node's one daemon device, to two pods at once. The error is retryable: once the other claim
// is unprepared, the kubelet's next try succeeds.
func preparedElsewhere(cp map[types.UID]checkpoint.ClaimEntry, claim *resourcev1.ResourceClaim, plan claimPlan) error {
	want := map[[2]string]bool{}
	for _, dev := range plan.Devices {
		want[[2]string{dev.Pool, dev.Device}] = true
	}
	var clashes []string
	for uid, e := range cp {
		if uid == claim.UID || e.State != checkpoint.PrepareCompleted {
			continue
		}
		for _, dev := range e.Devices {
			if want[[2]string{dev.Pool, dev.Device}] {
				clashes = append(clashes, fmt.Sprintf("device %s/%s is prepared for claim %s/%s (%s)", dev.Pool, dev.Device, e.Namespace, e.Name, uid))
			}
		}
	}
	if len(clashes) == 0 {
		return nil
	}
	slices.Sort(clashes)
	return failure.Retryablef("not preparing claim %s/%s (%s): %s; it is prepared once that claim is unprepared",
		claim.Namespace, claim.Name, claim.UID, strings.Join(clashes, "; "))
}

// preparedDevices lists the claim's devices with the CDI ids of those that have a CDI device
// in spec (none when spec is nil).
func preparedDevices(claimUID types.UID, plan claimPlan, withCDI map[string]bool) []checkpoint.PreparedDevice {
	out := make([]checkpoint.PreparedDevice, 0, len(plan.Devices))
	for _, dev := range plan.Devices {
		p := checkpoint.PreparedDevice{Requests: []string{dev.Request}, Pool: dev.Pool, Device: dev.Device}
		if withCDI[dev.Device] {
			p.CDIDeviceIDs = []string{cdi.DeviceID(claimUID, dev.Device)}
		}
		out = append(out, p)
	}
	return out
}

// checkIMEXNames is devices.CheckIMEXNames for the node's options.
func (s *State) checkIMEXNames() error {
	return devices.CheckIMEXNames(s.cfg.Gates, s.cfg.ReadHostFile, s.cfg.NodeName)
}
