package secretmirror

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metric names, exported on the controller-runtime metrics endpoint.
const (
	ForeignTargetsMetric = "cdplane_secretmirror_foreign_targets_total"
	WriteConflictsMetric = "cdplane_secretmirror_write_conflicts_total"
)

// Both counters are labelled with the plane and its source namespace: constant in a deployed
// controller, and what tells apart several planes run in one process (tests).
var (
	foreignTargets = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: ForeignTargetsMetric,
		Help: "Times the Secret mirror refused to write or delete a Secret that is not a copy owned by this control plane.",
	}, []string{"control_plane_id", "source_namespace"})
	writeConflicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: WriteConflictsMetric,
		Help: "Conflicts (HTTP 409) the Secret mirror met writing or deleting a copy; each is retried from a fresh read.",
	}, []string{"control_plane_id", "source_namespace"})
)

func init() {
	metrics.Registry.MustRegister(foreignTargets, writeConflicts)
}
