// Package metrics holds every Prometheus metric cdplane's components export, in one place, each
// labelled control_plane_id ("" for the legacy plane), registered with controller-runtime's
// registry (served on the controller's metrics endpoint).
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
)

var (
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
	crmetrics.Registry.MustRegister(ForeignRefusals, SecretMirrorForeignTargets, SecretMirrorWriteConflicts, DomainsLabelled)
}
