package kubeletplugin

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"cdplane/internal/kubeletplugin/checkpoint"
	"cdplane/internal/kubeletplugin/devices"
	"cdplane/internal/kubeletplugin/failure"
	"cdplane/internal/metrics"
)

// claimMetrics records one plugin's prepares and unprepares in the metrics of its plane.
// Several plugins in one process (the simulated cluster) add up in the same series.
type claimMetrics struct {
	prepareDuration, unprepareDuration prometheus.Observer
	prepareErrors, unprepareErrors     *prometheus.CounterVec
	prepared                           *prometheus.GaugeVec

	mu sync.Mutex
	// reported is what this plugin added to the prepared gauge, by kind.
	reported map[devices.DeviceKind]int
}

func newClaimMetrics(m *metrics.KubeletPluginMetrics, controlPlaneID string) *claimMetrics {
	plane := prometheus.Labels{metrics.LabelControlPlaneID: controlPlaneID}
	c := &claimMetrics{
		prepareDuration:   m.PrepareDuration.With(plane),
		unprepareDuration: m.UnprepareDuration.With(plane),
		prepareErrors:     m.PrepareErrors.MustCurryWith(plane),
		unprepareErrors:   m.UnprepareErrors.MustCurryWith(plane),
		prepared:          m.PreparedClaims.MustCurryWith(plane),
		reported:          map[devices.DeviceKind]int{},
	}
	for _, r := range failure.PrepareReasons {
		c.prepareErrors.WithLabelValues(string(r))
	}
	for _, r := range failure.UnprepareReasons {
		c.unprepareErrors.WithLabelValues(string(r))
	}
	for _, k := range []devices.DeviceKind{devices.KindChannel, devices.KindDaemon} {
		c.prepared.WithLabelValues(string(k))
	}
	return c
}

// prepareDone records one claim's prepare, started at start.
func (c *claimMetrics) prepareDone(start time.Time, err error) {
	c.prepareDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		c.prepareErrors.WithLabelValues(string(failure.ReasonOf(err))).Inc()
	}
}

// unprepareDone records one claim's unprepare, started at start.
func (c *claimMetrics) unprepareDone(start time.Time, err error) {
	c.unprepareDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		c.unprepareErrors.WithLabelValues(string(failure.ReasonOf(err))).Inc()
	}
}

// setPrepared sets this plugin's share of the prepared-claims gauge from its checkpoint: the
// claims checkpoint.PrepareCompleted, by kind.
func (c *claimMetrics) setPrepared(claims map[types.UID]checkpoint.ClaimEntry) {
	count := map[devices.DeviceKind]int{}
	for _, e := range claims {
		if e.State == checkpoint.PrepareCompleted {
			count[devices.DeviceKind(e.Kind)]++
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range []devices.DeviceKind{devices.KindChannel, devices.KindDaemon} {
		if d := count[k] - c.reported[k]; d != 0 {
			c.prepared.WithLabelValues(string(k)).Add(float64(d))
			c.reported[k] = count[k]
		}
	}
}

// forget takes this plugin's share out of the prepared-claims gauge, when it stops.
func (c *claimMetrics) forget() {
	c.setPrepared(nil)
}
