package metrics

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// gather returns the families named name from controller-runtime's registry, which serves them.
func gather(t *testing.T, name string) []*dto.MetricFamily {
	t.Helper()
	mfs, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []*dto.MetricFamily
	for _, mf := range mfs {
		if mf.GetName() == name {
			out = append(out, mf)
		}
	}
	return out
}

func labelMap(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// TestDomainsCollector: the sources of one plane add up and give their earliest oldest-NotReady
// time; planes stay apart; a removed source is gone; ComputeDomains is the registered one.
func TestDomainsCollector(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	series := func() map[string]float64 {
		got := map[string]float64{}
		for _, name := range []string{ComputeDomainsName, ComputeDomainsOldestNotReadyName} {
			for _, mf := range gather(t, name) {
				for _, m := range mf.GetMetric() {
					l := labelMap(m)
					if id := l[LabelControlPlaneID]; id == "collector-a" || id == "collector-b" {
						got[name+" "+id+" "+l[LabelStatus]] = m.GetGauge().GetValue()
					}
				}
			}
		}
		return got
	}
	removeA1 := ComputeDomains.Add("collector-a", func() DomainCounts {
		return DomainCounts{Ready: 2, NotReady: 1, OldestNotReady: t0.Add(time.Hour)}
	})
	removeA2 := ComputeDomains.Add("collector-a", func() DomainCounts { return DomainCounts{NotReady: 3, OldestNotReady: t0} })
	removeB := ComputeDomains.Add("collector-b", func() DomainCounts { return DomainCounts{Ready: 1} })
	want := map[string]float64{
		ComputeDomainsName + " collector-a Ready":          2,
		ComputeDomainsName + " collector-a NotReady":       4,
		ComputeDomainsOldestNotReadyName + " collector-a ": float64(t0.Unix()),
		ComputeDomainsName + " collector-b Ready":          1,
		ComputeDomainsName + " collector-b NotReady":       0,
	}
	if diff := cmp.Diff(want, series()); diff != "" {
		t.Errorf("three sources (-want +got):\n%s", diff)
	}
	removeA2()
	removeB()
	want = map[string]float64{
		ComputeDomainsName + " collector-a Ready":          2,
		ComputeDomainsName + " collector-a NotReady":       1,
		ComputeDomainsOldestNotReadyName + " collector-a ": float64(t0.Add(time.Hour).Unix()),
	}
	if diff := cmp.Diff(want, series()); diff != "" {
		t.Errorf("after removing two sources (-want +got):\n%s", diff)
	}
	removeA1()
	if diff := cmp.Diff(map[string]float64{}, series()); diff != "" {
		t.Errorf("after removing every source (-want +got):\n%s", diff)
	}
}
