package metrics

import "github.com/prometheus/client_golang/prometheus"

// Metric names of the compute-domain daemon. Each daemon serves its own series only (one
// registry per daemon, so that daemons run in one process, as on a large simulated cluster,
// never mix their values).
const (
	DaemonInfoName                = "cdplane_daemon_info"
	DaemonRegisteredName          = "cdplane_daemon_registered"
	DaemonReadyName               = "cdplane_daemon_ready"
	DaemonCliqueIndexName         = "cdplane_daemon_clique_index"
	DaemonStartToReadyName        = "cdplane_daemon_start_to_ready_seconds"
	DaemonIMEXPeersName           = "cdplane_daemon_imex_peers"
	DaemonIMEXPeersLeftOutName    = "cdplane_daemon_imex_peers_left_out"
	DaemonIMEXBlockedName         = "cdplane_daemon_imex_blocked"
	DaemonIMEXStartsName          = "cdplane_daemon_imex_starts_total"
	DaemonIMEXStartErrorsName     = "cdplane_daemon_imex_start_errors_total"
	DaemonIMEXRestartsName        = "cdplane_daemon_imex_restarts_total"
	DaemonIMEXExitsName           = "cdplane_daemon_imex_exits_total"
	DaemonIMEXReloadsName         = "cdplane_daemon_imex_reloads_total"
	DaemonIMEXConfigWritesName    = "cdplane_daemon_imex_config_writes_total"
	DaemonIMEXReadinessChecksName = "cdplane_daemon_imex_readiness_checks_total"
	DaemonIMEXLastReadyName       = "cdplane_daemon_imex_last_ready_timestamp_seconds"
	DaemonSyncErrorsName          = "cdplane_daemon_sync_errors_total"
)

// Labels of the daemon's metrics. Every series carries control_plane_id, compute_domain_uid
// and node, constant for a daemon (one per node and domain, so the cardinality is that of the
// daemon pods); cdplane_daemon_info adds the descriptive ones. LabelReason is also used.
const (
	// LabelComputeDomainUID is the daemon's ComputeDomain's UID (the value of the
	// resource.nvidia.com/computeDomain label on its pod and node).
	LabelComputeDomainUID = "compute_domain_uid"
	// LabelNode is the daemon's node.
	LabelNode = "node"
	// LabelComputeDomainNamespace and LabelComputeDomainName name the domain (info only).
	LabelComputeDomainNamespace = "compute_domain_namespace"
	LabelComputeDomainName      = "compute_domain_name"
	// LabelCliqueID is the node's clique, empty without an NVLink fabric (info only).
	LabelCliqueID = "clique_id"
	// LabelVersion is the daemon's cdplane version (info only).
	LabelVersion = "version"
	// LabelResult is a readiness query's answer: ready, not_ready or error.
	LabelResult = "result"
	// LabelFile is an IMEX file the daemon rewrote: imexd.cfg, nodes.cfg or hosts.
	LabelFile = "file"
)

// DaemonIdentity is what labels a daemon's series.
type DaemonIdentity struct {
	ControlPlaneID, DomainUID, DomainNamespace, DomainName, NodeName, CliqueID, Version string
}

// DaemonMetrics are one daemon's metrics, each labelled with its identity.
type DaemonMetrics struct {
	// Info is 1, labelled with the daemon's domain, clique and version.
	Info prometheus.Gauge
	// Registered is 1 while this node has an entry with an index in its clique's membership,
	// Ready 1 while that entry's status is Ready, CliqueIndex its index (-1 without one).
	Registered, Ready, CliqueIndex prometheus.Gauge
	// StartToReady is the time from the daemon's start to its entry first being Ready; no
	// series before.
	StartToReady *prometheus.GaugeVec
	// Peers are the clique entries in IMEX's node list (this node included) as last written;
	// PeersLeftOut the entries left out because they conflict with others.
	Peers, PeersLeftOut prometheus.Gauge
	// Blocked is 1, by reason (HostIMEXInUse, FabricError), when IMEX cannot run on the node
	// and is not retried.
	Blocked *prometheus.GaugeVec
	// Starts counts IMEX processes started, StartErrors starts that failed, Reloads the reloads
	// (SIGUSR1) sent, SyncErrors the failures to apply a membership change.
	Starts, StartErrors, Reloads, SyncErrors prometheus.Counter
	// Restarts counts the restarts of IMEX the daemon decided on, by reason; Exits the runs
	// that ended without being asked to, by reason; ConfigWrites the IMEX files rewritten, by
	// file; ReadinessChecks the daemon's own readiness queries, by result.
	Restarts, Exits, ConfigWrites, ReadinessChecks *prometheus.CounterVec
	// LastReady is the Unix time of the daemon's last readiness query that IMEX answered
	// Ready; no series before.
	LastReady *prometheus.GaugeVec
}

// NewDaemonMetrics returns a daemon's metrics, unregistered: each daemon registers them in a
// registry of its own.
func NewDaemonMetrics(id DaemonIdentity) *DaemonMetrics {
	labels := prometheus.Labels{LabelControlPlaneID: id.ControlPlaneID, LabelComputeDomainUID: id.DomainUID, LabelNode: id.NodeName}
	info := prometheus.Labels{LabelComputeDomainNamespace: id.DomainNamespace, LabelComputeDomainName: id.DomainName,
		LabelCliqueID: id.CliqueID, LabelVersion: id.Version}
	for k, v := range labels {
		info[k] = v
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	}
	counterVec := func(name, help, label string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, []string{label})
	}
	gaugeVec := func(name, help string, vary ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, vary)
	}
	return &DaemonMetrics{
		Info: prometheus.NewGauge(prometheus.GaugeOpts{Name: DaemonInfoName,
			Help: "Always 1: the daemon's ComputeDomain (namespace, name, UID), node, clique and cdplane version.", ConstLabels: info}),
		Registered: gauge(DaemonRegisteredName, "1 while this node has an entry with an index in its clique's membership (the clique, or the domain's status.nodes), 0 before and after."),
		Ready:      gauge(DaemonReadyName, "1 while this node's entry in its clique's membership is Ready (the controller's copy of the daemon pod's readiness), 0 otherwise."),
		CliqueIndex: gauge(DaemonCliqueIndexName,
			"This node's index in its clique (its IMEX node id), -1 while it has none."),
		StartToReady: gaugeVec(DaemonStartToReadyName,
			"Seconds from the daemon's start to its entry first being Ready; absent until then."),
		Peers: gauge(DaemonIMEXPeersName,
			"Clique entries in IMEX's node list (this node included) as the daemon last wrote it."),
		PeersLeftOut: gauge(DaemonIMEXPeersLeftOutName,
			"Clique entries left out of IMEX's node list because they conflict with others (a shared address or index, an address that does not parse, an index out of range)."),
		Blocked: gaugeVec(DaemonIMEXBlockedName,
			"1, by reason (HostIMEXInUse, FabricError), when IMEX cannot run on this node and the daemon does not retry; 0 otherwise.", LabelReason),
		Starts:      counter(DaemonIMEXStartsName, "IMEX processes the daemon started, the first included."),
		StartErrors: counter(DaemonIMEXStartErrorsName, "Starts of IMEX that failed (retried with backoff unless IMEX cannot run on the node)."),
		Reloads:     counter(DaemonIMEXReloadsName, "Reloads (SIGUSR1) the daemon sent IMEX after a membership change."),
		SyncErrors:  counter(DaemonSyncErrorsName, "Membership changes the daemon failed to apply (writing IMEX's files, starting, stopping or reloading IMEX); each is tried again at the next change or retry."),
		Restarts: counterVec(DaemonIMEXRestartsName,
			"Restarts of IMEX the daemon decided on, by reason: exited (IMEX ended on its own; started again after the backoff), config_changed (imexd.cfg or nodes.cfg changed), index_changed (this node's index changed).", LabelReason),
		Exits: counterVec(DaemonIMEXExitsName,
			"IMEX runs that ended without the daemon stopping them, by reason: exit_status (exited with a status), signal (killed by a signal), session_in_use (another IMEX holds the node's session), other.", LabelReason),
		ConfigWrites: counterVec(DaemonIMEXConfigWritesName,
			"IMEX files the daemon rewrote because their content changed, by file (imexd.cfg, nodes.cfg, hosts).", LabelFile),
		ReadinessChecks: counterVec(DaemonIMEXReadinessChecksName,
			"The daemon's own readiness queries of IMEX (after a restart until Ready, and before a reload), by result: ready, not_ready, error (IMEX could not be asked). The pod's readiness probe is not counted here.", LabelResult),
		LastReady: gaugeVec(DaemonIMEXLastReadyName,
			"Unix time of the daemon's last readiness query that IMEX answered Ready; absent before the first."),
	}
}

// Collectors lists the metrics for registration.
func (m *DaemonMetrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.Info, m.Registered, m.Ready, m.CliqueIndex, m.StartToReady, m.Peers, m.PeersLeftOut, m.Blocked,
		m.Starts, m.StartErrors, m.Reloads, m.SyncErrors, m.Restarts, m.Exits, m.ConfigWrites, m.ReadinessChecks, m.LastReady,
	}
}
