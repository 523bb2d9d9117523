package kubeletplugin

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	draplugin "k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"cdplane/internal/kubeletplugin/failure"
)

// UnprepareResourceClaims unprepares each claim (see claims.State.Unprepare), after stopping and
// waiting for a prepare of the same claim in progress (see claimlock.Locks).
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []draplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	if len(claims) > 0 {
		defer func() { d.metrics.setPrepared(d.claims.Snapshot()) }()
	}
	for _, c := range claims {
		logger := klog.FromContext(ctx).WithValues("claim", c.NamespacedName, "claimUID", c.UID)
		start := time.Now()
		err := d.claims.Unprepare(klog.NewContext(ctx, logger), c.UID)
		d.metrics.unprepareDone(start, err)
		if err != nil {
			logger.Error(err, "Unpreparing claim failed", "reason", failure.ReasonOf(err))
			err = fmt.Errorf("claim %s: %w", c.NamespacedName, err)
		}
		out[c.UID] = err
	}
	return out, nil
}
