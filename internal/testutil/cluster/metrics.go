package cluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"
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
	return SumMetric(string(raw), name, match), nil
}

// SumMetric sums the samples of metric name in Prometheus text format whose labels include
// every pair in match.
func SumMetric(text, name string, match map[string]string) float64 {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		labels, value := "", line[len(name):]
		if strings.HasPrefix(value, "{") {
			end := strings.LastIndex(value, "}")
			if end < 0 {
				continue
			}
			labels, value = value[1:end], value[end+1:]
		}
		ok := true
		for k, v := range match {
			if !strings.Contains(","+labels+",", ","+k+"=\""+v+"\",") {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err == nil {
			sum += f
		}
	}
	return sum
}
