package kubeletplugin

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"cdplane/internal/metrics"
)

// FailureReason says why a prepare or unprepare of a claim failed: the reason label of
// cdplane_kubeletplugin_prepare_errors_total and cdplane_kubeletplugin_unprepare_errors_total.
type FailureReason string

// Failure reasons, one for each step of a prepare or unprepare that can fail.
const (
	// FailureBadConfig: the claim's allocation or opaque config is invalid (a permanent error).
	FailureBadConfig FailureReason = "bad_config"
	// FailureWrongNamespace: a channel claim outside its ComputeDomain's namespace, a daemon
	// claim outside the driver namespace (a permanent error).
	FailureWrongNamespace FailureReason = "wrong_namespace"
	// FailureDomainNotFound: the claim's ComputeDomain is not in the plugin's cache (yet), or
	// it is being deleted.
	FailureDomainNotFound FailureReason = "domain_not_found"
	// FailureNodeLabel: the node serves another ComputeDomain, or its label could not be
	// written or removed.
	FailureNodeLabel FailureReason = "node_label"
	// FailureCliqueUnknown: the node's NVLink clique is not known (NVML unavailable, fabric
	// registration in progress or failed).
	FailureCliqueUnknown FailureReason = "clique_unknown"
	// FailureIMEXNotReady: the node's daemon of the domain was not Ready within
	// --prepare-wait-timeout, or (host-managed) the host IMEX is not ready.
	FailureIMEXNotReady FailureReason = "imex_not_ready"
	// FailureDriver: the host's NVIDIA driver cannot serve the claim: the driver root lacks
	// nvidia-imex or holds another driver, the driver is too old for IMEXDaemonsWithDNSNames, or
	// the IMEX device numbers cannot be read.
	FailureDriver FailureReason = "driver"
	// FailureDeviceInUse: a device of the claim is prepared for another claim (checkpoint).
	FailureDeviceInUse FailureReason = "device_in_use"
	// FailureCDI: a CDI spec could not be written or removed.
	FailureCDI FailureReason = "cdi_write"
	// FailureCheckpoint: the checkpoint could not be written.
	FailureCheckpoint FailureReason = "checkpoint"
	// FailureOther: anything else (an unprepare of the claim came meanwhile, a daemon claim on
	// a host-managed node, the domain's config directory could not be written).
	FailureOther FailureReason = "other"
)

// prepareFailures and unprepareFailures are the reasons each can fail with; their counters
// start at zero for the plugin's plane.
var (
	prepareFailures = []FailureReason{FailureBadConfig, FailureWrongNamespace, FailureDomainNotFound, FailureNodeLabel,
		FailureCliqueUnknown, FailureIMEXNotReady, FailureDriver, FailureDeviceInUse, FailureCDI, FailureCheckpoint, FailureOther}
	unprepareFailures = []FailureReason{FailureNodeLabel, FailureCDI, FailureCheckpoint, FailureOther}
)

// failure tags an error with the reason it is counted under; its message is the error's.
type failure struct {
	reason FailureReason
	err    error
}

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// failed tags err (nil stays nil) with reason, unless it carries one already.
func failed(reason FailureReason, err error) error {
	if err == nil {
		return nil
	}
	var f *failure
	if errors.As(err, &f) {
		return err
	}
	return &failure{reason: reason, err: err}
}

// ReasonOf returns the reason a failed prepare or unprepare is counted under: the first
// reason err carries, FailureOther when it carries none.
func ReasonOf(err error) FailureReason {
	var f *failure
	if errors.As(err, &f) {
		return f.reason
	}
	return FailureOther
}

// claimMetrics records one plugin's prepares and unprepares in the metrics of its plane.
// Several plugins in one process (the simulated cluster) add up in the same series.
type claimMetrics struct {
	prepareDuration, unprepareDuration prometheus.Observer
	prepareErrors, unprepareErrors     *prometheus.CounterVec
	prepared                           *prometheus.GaugeVec

	mu sync.Mutex
	// reported is what this plugin added to the prepared gauge, by kind.
	reported map[DeviceKind]int
}

func newClaimMetrics(m *metrics.KubeletPluginMetrics, controlPlaneID string) *claimMetrics {
	plane := prometheus.Labels{metrics.LabelControlPlaneID: controlPlaneID}
	c := &claimMetrics{
		prepareDuration:   m.PrepareDuration.With(plane),
		unprepareDuration: m.UnprepareDuration.With(plane),
		prepareErrors:     m.PrepareErrors.MustCurryWith(plane),
		unprepareErrors:   m.UnprepareErrors.MustCurryWith(plane),
		prepared:          m.PreparedClaims.MustCurryWith(plane),
		reported:          map[DeviceKind]int{},
	}
	for _, r := range prepareFailures {
		c.prepareErrors.WithLabelValues(string(r))
	}
	for _, r := range unprepareFailures {
		c.unprepareErrors.WithLabelValues(string(r))
	}
	for _, k := range []DeviceKind{KindChannel, KindDaemon} {
		c.prepared.WithLabelValues(string(k))
	}
	return c
}

// prepareDone records one claim's prepare, started at start.
func (c *claimMetrics) prepareDone(start time.Time, err error) {
	c.prepareDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		c.prepareErrors.WithLabelValues(string(ReasonOf(err))).Inc()
	}
}

// unprepareDone records one claim's unprepare, started at start.
func (c *claimMetrics) unprepareDone(start time.Time, err error) {
	c.unprepareDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		c.unprepareErrors.WithLabelValues(string(ReasonOf(err))).Inc()
	}
}

// setPrepared sets this plugin's share of the prepared-claims gauge from its checkpoint: the
// claims PrepareCompleted, by kind.
func (c *claimMetrics) setPrepared(claims map[types.UID]ClaimEntry) {
	count := map[DeviceKind]int{}
	for _, e := range claims {
		if e.State == PrepareCompleted {
			count[DeviceKind(e.Kind)]++
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range []DeviceKind{KindChannel, KindDaemon} {
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
