package readiness

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/plane"
)

// NewCache is the watch cache the View reads: every ComputeDomain's metadata (indexed by UID,
// see View.Setup) and the driver namespace's cliques of the node's clique cliqueID.
func NewCache(cfg *rest.Config, scheme *runtime.Scheme, mapper meta.RESTMapper, driverNS, controlPlaneID, cliqueID string) (cache.Cache, error) {
	// Scoped at the cache to this plane: its domains (by the plane label; the legacy plane's
	// carry none) and cliques in its own driver namespace. A claim for another plane's domain
	// finds no domain here and fails.
	// Cliques: only those of this node's clique (label), so that a clique's change reaches
	// the plugins of its own rack, not every plugin of the cluster. A node whose clique is not
	// known yet, or changes later, reads its clique from the API (View.clique).
	cliqueSel := labels.SelectorFromSet(labels.Set{cdv1beta1.CliqueIDLabel: cliqueID})
	c, err := cache.New(cfg, cache.Options{
		Scheme:           scheme,
		Mapper:           mapper,
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&cdv1beta1.ComputeDomainClique{}: {Namespaces: map[string]cache.Config{driverNS: {}}, Label: cliqueSel},
			DomainMeta():                     {Label: plane.Selector(controlPlaneID)},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the watch cache: %w", err)
	}
	return c, nil
}

// CacheSyncReport is how often a plugin still waiting for its watch cache says so.
const CacheSyncReport = 30 * time.Second

// WaitForSync waits for the watch cache to sync, for as long as the plugin runs, logging every
// report that it still waits. It has no deadline of its own: when many plugins start at once
// (a new plane, an upgrade of every node) the apiserver may throttle their first lists and
// watches for minutes, and a plugin that gave up and restarted would come back with a new
// connection and list again, adding to the load that held it up. The chart's startup probe
// bounds how long a plugin may take to start.
func WaitForSync(ctx context.Context, synced func(context.Context) bool, report time.Duration) error {
	logger := klog.FromContext(ctx)
	start := time.Now()
	for {
		waitCtx, cancel := context.WithTimeout(ctx, report)
		ok := synced(waitCtx)
		cancel()
		if ok {
			if waited := time.Since(start); waited >= report {
				logger.Info("The watch cache of ComputeDomains and cliques synced", "after", waited.Round(time.Second))
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("the watch cache of ComputeDomains and cliques did not sync: %w", context.Cause(ctx))
		}
		logger.Info("Waiting for the watch cache of ComputeDomains and cliques to sync (the apiserver is slow to answer)", "waited", time.Since(start).Round(time.Second))
	}
}
