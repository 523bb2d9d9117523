package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"io"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Metrics are the metric families of a Prometheus text exposition, by name.
type Metrics map[string]*dto.MetricFamily

// ParseMetrics reads the Prometheus text format.
func ParseMetrics(r io.Reader) (Metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	return fams, nil
}

// ReadMetrics reads the metrics the apiserver exports at /metrics.
func ReadMetrics(ctx context.Context, cfg *rest.Config) (Metrics, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the apiserver's metrics: %w", err)
	}
	return ParseMetrics(bytes.NewReader(raw))
}

// Sum adds up the samples of counter, gauge or untyped metric name whose labels include every
// pair in match; a label the sample lacks matches the empty value. It is zero when there is
// no such metric, or it is a histogram or summary.
func (m Metrics) Sum(name string, match map[string]string) float64 {
	fam := m[name]
	if fam == nil {
		return 0
	}
	var sum float64
	for _, s := range fam.GetMetric() {
		if !hasLabels(s, match) {
			continue
		}
		switch {
		case s.Counter != nil:
			sum += s.GetCounter().GetValue()
		case s.Gauge != nil:
			sum += s.GetGauge().GetValue()
		case s.Untyped != nil:
			sum += s.GetUntyped().GetValue()
		}
	}
	return sum
}

func hasLabels(s *dto.Metric, match map[string]string) bool {
	for k, v := range match {
		got := ""
		for _, l := range s.GetLabel() {
			if l.GetName() == k {
				got = l.GetValue()
				break
			}
		}
		if got != v {
			return false
		}
	}
	return true
}
