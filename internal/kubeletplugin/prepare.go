package kubeletplugin

import (
	"context"
	"fmt"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	draplugin "k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"cdplane/internal/kubeletplugin/checkpoint"
	"cdplane/internal/kubeletplugin/failure"
)

// PrepareResourceClaims prepares each claim (see claims.State.Prepare). The readiness waits of all
// claims of one call share one deadline, ReadyWaitTimeout from the start of the call, so that
// the kubelet gets an answer in bounded time and retries. A claim that fails for a reason its
// author can fix gets events on its pods (podEvents); the error the kubelet gets is the same.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourcev1.ResourceClaim) (map[types.UID]draplugin.PrepareResult, error) {
	deadline := time.Now().Add(d.opts.ReadyWaitTimeout)
	out := make(map[types.UID]draplugin.PrepareResult, len(claims))
	if len(claims) > 0 {
		defer func() { d.metrics.setPrepared(d.claims.Snapshot()) }()
	}
	for _, claim := range claims {
		logger := klog.FromContext(ctx).WithValues("claim", klog.KObj(claim), "claimUID", claim.UID)
		start := time.Now()
		devices, err := d.claims.Prepare(klog.NewContext(ctx, logger), claim, deadline)
		d.metrics.prepareDone(start, err)
		if err != nil {
			logger.Error(err, "Preparing claim failed", "permanent", failure.IsPermanent(err), "reason", failure.ReasonOf(err))
			d.podEvents.prepareFailed(klog.NewContext(ctx, logger), claim, err)
			out[claim.UID] = draplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)}
			continue
		}
		d.podEvents.prepared(claim.UID)
		logger.V(1).Info("Prepared claim", "devices", len(devices))
		out[claim.UID] = draplugin.PrepareResult{Devices: toDRADevices(devices)}
	}
	return out, nil
}

func toDRADevices(devices []checkpoint.PreparedDevice) []draplugin.Device {
	out := make([]draplugin.Device, 0, len(devices))
	for _, p := range devices {
		out = append(out, draplugin.Device{Requests: p.Requests, PoolName: p.Pool, DeviceName: p.Device, CDIDeviceIDs: p.CDIDeviceIDs})
	}
	return out
}
