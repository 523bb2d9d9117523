package cluster

import (
	"context"

	"cdplane/internal/sim/controlplane"
)

// MetricSum sums the samples of a counter or gauge the apiserver exports at /metrics whose
// labels include every pair in match.
func (c *Cluster) MetricSum(ctx context.Context, name string, match map[string]string) (float64, error) {
	m, err := controlplane.ReadMetrics(ctx, c.Config)
	if err != nil {
		return 0, err
	}
	return m.Sum(name, match), nil
}
