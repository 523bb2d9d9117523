package devices

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

// Publisher publishes the node's devices as ResourceSlices through the DRA helper, or none while
// the node cannot serve ComputeDomains.
type Publisher struct {
	// Helper publishes the ResourceSlices (the DRA helper).
	Helper interface {
		PublishResources(ctx context.Context, resources resourceslice.DriverResources) error
	}
	// Events posts the events about the node.
	Events Events
	// Node, NumChannels, ControlPlaneID and WithDaemon say what the node publishes (see
	// NodeResources).
	Node           string
	NumChannels    int
	ControlPlaneID string
	WithDaemon     bool

	// blockSeen is the block reason the last publish saw (nil before the first), so that an
	// event is posted when it changes, not on every publish.
	blockSeen *string
}

// Events posts events about the node (the plugin's nodeEvents); a nil one posts nothing.
type Events interface {
	Post(ctx context.Context, eventType, reason, action, format string, args ...any)
}

// Publish publishes the node's devices, or none while the node cannot serve ComputeDomains
// (block, see BlockReason): NVML cannot be loaded (no GPU, or the driver not installed), the
// NVLink fabric registration has not completed, or it failed. The scheduler then places no
// ComputeDomain workload or daemon here, rather than on a node whose prepares would fail. The
// plugin stays up and publishes the devices once a later discovery succeeds. Each change of the
// reason is logged and posted as an event about the node.
func (p *Publisher) Publish(ctx context.Context, block string, discoveryErr error) error {
	res := NodeResources(p.Node, p.NumChannels, p.ControlPlaneID, p.WithDaemon)
	logger := klog.FromContext(ctx)
	changed := p.blockSeen == nil || *p.blockSeen != block
	wasBlocked := p.blockSeen != nil && *p.blockSeen != BlockNone && *p.blockSeen != BlockFabricFailed
	p.blockSeen = &block
	switch {
	case block == BlockFabricFailed:
		// CrashOnNVLinkFabricErrors off: the node serves as one without a fabric; it says so.
		logger.Error(discoveryErr, "NVLink fabric registration failed: the node serves ComputeDomains as a node without NVLink fabric (CrashOnNVLinkFabricErrors is off)",
			"node", p.Node)
		if changed {
			p.Events.Post(ctx, corev1.EventTypeWarning, block, "PublishDevices",
				"node %s serves ComputeDomains as a node without NVLink fabric (no IMEX, no channel device injected): its NVLink fabric registration failed: %v",
				p.Node, discoveryErr)
		}
	case block != BlockNone:
		res = resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{}}
		why := blockMessages[block]
		logger.Info("Publishing no devices, so no ComputeDomain workload is scheduled here: "+why,
			"node", p.Node, "reason", block, "err", fmt.Sprint(discoveryErr))
		if changed {
			p.Events.Post(ctx, corev1.EventTypeWarning, block, "PublishDevices",
				"node %s offers no ComputeDomain devices: %s: %v", p.Node, why, discoveryErr)
		}
	default:
		logger.V(1).Info("Publishing the node's devices", "node", p.Node, "channels", p.NumChannels)
		if changed && wasBlocked {
			p.Events.Post(ctx, corev1.EventTypeNormal, ReasonDevicesPublished, "PublishDevices",
				"node %s offers its ComputeDomain devices again: NVML loads and its NVLink clique is known", p.Node)
		}
	}
	if err := p.Helper.PublishResources(ctx, res); err != nil {
		return fmt.Errorf("publishing ResourceSlices: %w", err)
	}
	return nil
}

// blockMessages say, for each block reason, why the node offers no devices.
var blockMessages = map[string]string{
	BlockNVML:           "NVML cannot be loaded",
	BlockFabricNotReady: "its NVLink fabric registration has not completed",
	BlockFabricFailed:   "its NVLink fabric registration failed",
	BlockOther:          "its NVLink clique cannot be discovered",
}
