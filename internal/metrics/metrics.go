// Package metrics holds every Prometheus metric cdplane's components export, in one place, each
// labelled control_plane_id ("" for the legacy plane), registered with controller-runtime's
// registry (served on the controller's metrics endpoint, and on the kubelet plugin's).
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// LabelControlPlaneID is on every cdplane metric.
const LabelControlPlaneID = "control_plane_id"

// Metric names.
const (
	ForeignRefusalsName            = "cdplane_foreign_object_refusals_total"
	SecretMirrorForeignTargetsName = "cdplane_secretmirror_foreign_targets_total"
	SecretMirrorWriteConflictsName = "cdplane_secretmirror_write_conflicts_total"
	DomainsLabelledName            = "cdplane_computedomains_labelled_total"

	KubeletPluginPrepareDurationName   = "cdplane_kubeletplugin_prepare_duration_seconds"
	KubeletPluginUnprepareDurationName = "cdplane_kubeletplugin_unprepare_duration_seconds"
	KubeletPluginPrepareErrorsName     = "cdplane_kubeletplugin_prepare_errors_total"
	KubeletPluginUnprepareErrorsName   = "cdplane_kubeletplugin_unprepare_errors_total"
	KubeletPluginPreparedClaimsName    = "cdplane_kubeletplugin_prepared_claims"
)

// Labels of the kubelet plugin's metrics, besides control_plane_id.
const (
	// LabelReason is why a prepare or unprepare failed (kubeletplugin.FailureReason).
	LabelReason = "reason"
	// LabelKind is a claim's kind: channel or daemon.
	LabelKind = "kind"
)

// KubeletPluginDurationBuckets are the buckets of the prepare and unprepare durations: from a
// prepare answered from the checkpoint (milliseconds) to one that waited its whole
// --prepare-wait-timeout (15s by default) for the node's daemon.
var KubeletPluginDurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 60}

// KubeletPluginMetrics are the kubelet plugin's metrics, each labelled control_plane_id.
type KubeletPluginMetrics struct {
	// PrepareDuration and UnprepareDuration observe each claim's prepare and unprepare,
	// successful or not, in seconds.
	PrepareDuration, UnprepareDuration *prometheus.HistogramVec
	// PrepareErrors and UnprepareErrors count failed prepares and unprepares of a claim by
	// reason.
	PrepareErrors, UnprepareErrors *prometheus.CounterVec
	// PreparedClaims is the number of claims prepared (PrepareCompleted) on the node, by kind.
	PreparedClaims *prometheus.GaugeVec
}

// NewKubeletPluginMetrics returns the kubelet plugin's metrics, unregistered (tests use their
// own; the plugin uses KubeletPlugin).
func NewKubeletPluginMetrics() *KubeletPluginMetrics {
	return &KubeletPluginMetrics{
		PrepareDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    KubeletPluginPrepareDurationName,
			Help:    "Time the kubelet plugin took to prepare one claim (NodePrepareResources), successful or not.",
			Buckets: KubeletPluginDurationBuckets,
		}, []string{LabelControlPlaneID}),
		UnprepareDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    KubeletPluginUnprepareDurationName,
			Help:    "Time the kubelet plugin took to unprepare one claim (NodeUnprepareResources), successful or not.",
			Buckets: KubeletPluginDurationBuckets,
		}, []string{LabelControlPlaneID}),
		PrepareErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: KubeletPluginPrepareErrorsName,
			Help: "Prepares of a claim that failed, by reason.",
		}, []string{LabelControlPlaneID, LabelReason}),
		UnprepareErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: KubeletPluginUnprepareErrorsName,
			Help: "Unprepares of a claim that failed, by reason.",
		}, []string{LabelControlPlaneID, LabelReason}),
		PreparedClaims: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: KubeletPluginPreparedClaimsName,
			Help: "Claims prepared on the node (checkpointed PrepareCompleted), by kind (channel, daemon).",
		}, []string{LabelControlPlaneID, LabelKind}),
	}
}

// Collectors lists the metrics for registration.
func (m *KubeletPluginMetrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.PrepareDuration, m.UnprepareDuration, m.PrepareErrors, m.UnprepareErrors, m.PreparedClaims}
}

var (
	// KubeletPlugin are the kubelet plugin's metrics, served on its --metrics-bind-address.
	KubeletPlugin = NewKubeletPluginMetrics()

	// DomainsLabelled counts ComputeDomains the controller gave its plane's label because no
	// admission policy did (Kubernetes before 1.36); labels control_plane_id.
	DomainsLabelled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: DomainsLabelledName,
		Help: "ComputeDomains the controller labelled for its control plane because no MutatingAdmissionPolicy did.",
	}, []string{LabelControlPlaneID})

	// ForeignRefusals counts writes a plane refused because a fresh read showed the object is
	// not its own; labels control_plane_id, kind.
	ForeignRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: ForeignRefusalsName,
		Help: "Writes refused because a fresh read showed the object belongs to another control plane.",
	}, []string{LabelControlPlaneID, "kind"})

	// SecretMirrorForeignTargets counts Secrets the mirror refused to write or delete because
	// they are not copies this plane owns; labels control_plane_id, source_namespace.
	SecretMirrorForeignTargets = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: SecretMirrorForeignTargetsName,
		Help: "Times the Secret mirror refused to write or delete a Secret that is not a copy owned by this control plane.",
	}, []string{LabelControlPlaneID, "source_namespace"})

	// SecretMirrorWriteConflicts counts conflicts the mirror met writing or deleting a copy,
	// each retried from a fresh read; labels control_plane_id, source_namespace.
	SecretMirrorWriteConflicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: SecretMirrorWriteConflictsName,
		Help: "Conflicts (HTTP 409) the Secret mirror met writing or deleting a copy; each is retried from a fresh read.",
	}, []string{LabelControlPlaneID, "source_namespace"})
)

func init() {
	crmetrics.Registry.MustRegister(KubeletPlugin.Collectors()...)
	crmetrics.Registry.MustRegister(ForeignRefusals, SecretMirrorForeignTargets, SecretMirrorWriteConflicts, DomainsLabelled)
}
