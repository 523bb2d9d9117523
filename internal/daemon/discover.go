package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	"cdplane/internal/nvml"
)

// DiscoverClique reads the node's clique id through d. A fabric still registering is retried
// every interval until ctx ends. A failed fabric is returned at once when crashOnFabricErrors
// is set (CrashOnNVLinkFabricErrors), and otherwise logged and retried, so the operator sees
// it while the node stays not ready.
func DiscoverClique(ctx context.Context, d nvml.Discoverer, crashOnFabricErrors bool, interval time.Duration, log logr.Logger) (string, error) {
	for {
		res, err := d.Discover(ctx)
		switch {
		case err == nil:
			return res.CliqueID, nil
		case errors.Is(err, nvml.ErrFabricNotReady):
			log.Info("NVLink fabric registration not finished; waiting", "error", err.Error())
		case errors.Is(err, nvml.ErrFabricFailed) && !crashOnFabricErrors:
			// As NVIDIA's daemon: the node runs as one without a fabric, and says so.
			log.Error(err, "NVLink fabric registration failed; running as a node without NVLink fabric (CrashOnNVLinkFabricErrors is off)")
			return "", nil
		default:
			return "", fmt.Errorf("discovering the node's clique: %w", err)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("discovering the node's clique: %w (last error: %w)", ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}
