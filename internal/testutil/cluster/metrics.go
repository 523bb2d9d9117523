package cluster

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"

	"cdplane/internal/promtext"
)

// MetricSum sums the samples of a counter or gauge the apiserver exports at /metrics whose
// labels include every pair in match.
func (c *Cluster) MetricSum(ctx context.Context, name string, match map[string]string) (float64, error) {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return 0, err
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading the apiserver's metrics: %w", err)
	}
	return promtext.Sum(string(raw), name, match), nil
}
