// Package metrics holds every Prometheus metric cdplane's components export, in one place, each
// labelled control_plane_id ("" for the legacy plane). The controller's and the kubelet plugin's
// are registered with controller-runtime's registry (served on their metrics endpoints); each
// daemon registers its own (DaemonMetrics) in a registry of its own.
package metrics

import (
	"sync"
	"time"

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

	ComputeDomainsName               = "cdplane_computedomains"
	ComputeDomainsOldestNotReadyName = "cdplane_computedomains_oldest_not_ready_timestamp_seconds"
	NodeJoinToReadyName              = "cdplane_node_join_to_ready_seconds"
	ReconcileStepName                = "cdplane_computedomain_reconcile_step_seconds"
	APIWritesName                    = "cdplane_api_writes_total"
	ControllerLeaderName             = "cdplane_controller_leader"
)

// Labels of the controller's metrics, besides control_plane_id (and LabelKind: an object's kind
// for cdplane_api_writes_total).
const (
	// LabelStatus is a ComputeDomain's status: Ready or NotReady.
	LabelStatus = "status"
	// LabelVerb is the client call of a write: create, update, patch, apply, delete,
	// deletecollection.
	LabelVerb = "verb"
	// LabelSubresource is the subresource a write went to ("status"), empty for the object.
	LabelSubresource = "subresource"
	// LabelStep is a step of a ComputeDomain reconcile (ReconcileStep*).
	LabelStep = "step"
)

// The steps of a ComputeDomain reconcile, as cdplane_computedomain_reconcile_step_seconds
// labels them.
const (
	// ReconcileStepResources: the finalizer, a takeover, the claim templates and the DaemonSet.
	ReconcileStepResources = "resources"
	// ReconcileStepMembership: reading the daemon pods, nodes, claims and existing entries from
	// the cache and computing the membership.
	ReconcileStepMembership = "membership"
	// ReconcileStepCliques: writing the changed cliques (with their fresh read) and deleting
	// the empty ones.
	ReconcileStepCliques = "cliques"
	// ReconcileStepStatus: writing the status.
	ReconcileStepStatus = "status"
)

// Labels of the kubelet plugin's metrics, besides control_plane_id.
const (
	// LabelReason is why a prepare or unprepare failed (failure.Reason in internal/kubeletplugin/failure).
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

// NodeJoinToReadyBuckets are the buckets of the join-to-Ready time: from a daemon whose IMEX is
// Ready at its first check (a second) to one waiting minutes for its node's driver or peers.
var NodeJoinToReadyBuckets = []float64{0.5, 1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200}

var (
	// NodeJoinToReady observes, once per join, the time from a node's entry first appearing in a
	// domain's membership to that entry being Ready, as the leading controller saw them (joins
	// that began before it started are not observed); labels control_plane_id.
	NodeJoinToReady = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    NodeJoinToReadyName,
		Help:    "Time from a node's entry first appearing in a ComputeDomain's membership to that entry being Ready, once per join seen by this controller.",
		Buckets: NodeJoinToReadyBuckets,
	}, []string{LabelControlPlaneID})

	// ReconcileStep observes how long each step of a ComputeDomain reconcile took; labels
	// control_plane_id, step. The cliques and status steps run at the same time, each timed
	// from the end of the membership step.
	ReconcileStep = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    ReconcileStepName,
		Help:    "Time one step of a ComputeDomain reconcile took: resources (finalizer, takeover, claim templates, DaemonSet), membership (read from the cache and computed), then cliques and status (written at the same time, each timed from the end of membership).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
	}, []string{LabelControlPlaneID, LabelStep})

	// APIWrites counts the controller's write requests (CountWrites); labels control_plane_id,
	// kind, verb, subresource.
	APIWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: APIWritesName,
		Help: "Write requests the controller sent to the apiserver (successful or not), by object kind, client verb (create, update, patch, apply, delete, deletecollection) and subresource.",
	}, []string{LabelControlPlaneID, LabelKind, LabelVerb, LabelSubresource})

	// ControllerLeader is 1 while this controller process leads its plane (reconciles), 0 while
	// it waits for the lease; labels control_plane_id.
	ControllerLeader = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: ControllerLeaderName,
		Help: "1 while this controller replica leads its control plane (holds the lease, or runs without leader election), 0 while it waits for the lease.",
	}, []string{LabelControlPlaneID})

	// ComputeDomains exports cdplane_computedomains and
	// cdplane_computedomains_oldest_not_ready_timestamp_seconds from the controllers' views of
	// their planes' domains.
	ComputeDomains = NewDomainsCollector()
)

// DomainCounts is one controller's view of its plane's ComputeDomains.
type DomainCounts struct {
	// Ready and NotReady count the domains by status.status; a domain without a status yet is
	// NotReady.
	Ready, NotReady int
	// OldestNotReady is when the domain that has been NotReady the longest became so; zero when
	// none is.
	OldestNotReady time.Time
}

// DomainsCollector exports, at each scrape, the domain counts of every source added (one per
// controller manager in the process; several sources of one plane add up, and the oldest
// NotReady is their earliest).
type DomainsCollector struct {
	domains, oldest *prometheus.Desc

	mu      sync.Mutex
	sources map[*domainSource]struct{}
}

type domainSource struct {
	planeID string
	counts  func() DomainCounts
}

// NewDomainsCollector returns a collector without sources (tests use their own; the controller
// uses ComputeDomains).
func NewDomainsCollector() *DomainsCollector {
	return &DomainsCollector{
		domains: prometheus.NewDesc(ComputeDomainsName,
			"ComputeDomains of the control plane by status.status (Ready, NotReady; a domain not reported on yet is NotReady), as this controller's cache holds them.",
			[]string{LabelControlPlaneID, LabelStatus}, nil),
		oldest: prometheus.NewDesc(ComputeDomainsOldestNotReadyName,
			"Unix time since which the control plane's longest-NotReady ComputeDomain has been NotReady (its Ready condition's last transition, else its creation); absent when none is NotReady.",
			[]string{LabelControlPlaneID}, nil),
		sources: map[*domainSource]struct{}{},
	}
}

// Add makes counts a source of plane planeID's series until remove is called.
func (c *DomainsCollector) Add(planeID string, counts func() DomainCounts) (remove func()) {
	s := &domainSource{planeID: planeID, counts: counts}
	c.mu.Lock()
	c.sources[s] = struct{}{}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		delete(c.sources, s)
		c.mu.Unlock()
	}
}

// Describe implements prometheus.Collector.
func (c *DomainsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.domains
	ch <- c.oldest
}

// Collect implements prometheus.Collector: per plane, Ready and NotReady (zero included) and,
// while a domain is NotReady, the oldest NotReady time.
func (c *DomainsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	sources := make([]*domainSource, 0, len(c.sources))
	for s := range c.sources {
		sources = append(sources, s)
	}
	c.mu.Unlock()
	byPlane := map[string]DomainCounts{}
	for _, s := range sources {
		n := s.counts()
		sum := byPlane[s.planeID]
		sum.Ready += n.Ready
		sum.NotReady += n.NotReady
		if !n.OldestNotReady.IsZero() && (sum.OldestNotReady.IsZero() || n.OldestNotReady.Before(sum.OldestNotReady)) {
			sum.OldestNotReady = n.OldestNotReady
		}
		byPlane[s.planeID] = sum
	}
	for id, n := range byPlane {
		ch <- prometheus.MustNewConstMetric(c.domains, prometheus.GaugeValue, float64(n.Ready), id, "Ready")
		ch <- prometheus.MustNewConstMetric(c.domains, prometheus.GaugeValue, float64(n.NotReady), id, "NotReady")
		if !n.OldestNotReady.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, float64(n.OldestNotReady.UnixNano())/1e9, id)
		}
	}
}

func init() {
	crmetrics.Registry.MustRegister(KubeletPlugin.Collectors()...)
	crmetrics.Registry.MustRegister(ForeignRefusals, SecretMirrorForeignTargets, SecretMirrorWriteConflicts, DomainsLabelled)
	crmetrics.Registry.MustRegister(NodeJoinToReady, ReconcileStep, APIWrites, ControllerLeader, ComputeDomains)
}
