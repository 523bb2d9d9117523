// Package kubeletplugin is the kubelet plugin of DRA driver compute-domain.nvidia.com, built on
// k8s.io/dynamic-resource-allocation/kubeletplugin (registration and DRA gRPC sockets as the
// kubelet expects them, resource.k8s.io/v1).
//
// It publishes the node's devices (channel-0 … channel-N-1 and daemon-0, see [devices.Devices]
// and [devices.NodeResources]) and prepares claims for them through CDI (package claims,
// [claims.State]):
//
//   - A channel claim (claims/prepare_channel.go): its ComputeDomain must be in the watch cache
//     (else a [*failure.RetryableError]), in the claim's namespace and not being deleted (else a
//     [*failure.PermanentError]); the node is labelled for the domain (refused while it serves
//     another); the node's daemon must be Ready in its clique or in the domain's status.nodes
//     ([readiness.DaemonReady]), waited for on a watch cache for at most
//     Options.ReadyWaitTimeout (else a [*failure.RetryableError]); then a CDI spec injects
//     channel0 (Single) or all 2048 channels (All), nothing on a node without NVLink fabric.
//   - A daemon claim (claims/prepare_daemon.go): the domain's IMEX config directory with its
//     template, and a CDI spec with the daemon's environment, that directory, and the IMEX
//     management device when the node has a clique.
//   - Unprepare (claims/unprepare.go) undoes either, idempotently; the node label goes only
//     when it is ours and no other claim of the domain needs it.
//
// Every claim's state (PrepareStarted, PrepareCompleted, PrepareAborted) is checkpointed in a
// file written atomically (package checkpoint). On start, claims left PrepareStarted whose
// ResourceClaim is gone are undone and marked PrepareAborted before the plugin serves.
//
// Options.HealthAddress serves the gRPC health service the kubelet's probes ask (package
// endpoints: SERVING while the plugin's own registration and DRA sockets answer),
// Options.MetricsAddress the Prometheus metrics; each prepare and unprepare is timed and each
// failure counted by its failure.Reason (metrics.go).
//
// A prepare that fails for a reason the claim's author can fix (a [*failure.UserError]: the
// domain is missing, in another namespace or being deleted, the opaque config is missing,
// invalid or conflicting, the node serves another domain) posts a Warning event on each pod the
// claim is reserved for (podevents.go), rate-limited per pod and reason; events about the node
// go on the plugin's own pod (events.go). All report controller compute-domain.nvidia.com from
// instance <node name>, as the plane chart's admission policy on the plugin's events requires.
//
// Opaque configs are decoded strictly ([claims.DecodeConfig]): an unknown field, a wrong kind or
// apiVersion is a permanent error naming the field. the prerequisites chart ships the same rules
// as a ValidatingAdmissionPolicy.
//
// The package is split by concern. Here: the DRA shim (Driver: Start and the wiring in start.go,
// the kubelet's calls in prepare.go and unprepare.go, with their metrics and pod events), the
// command (main.go) and events. Below it: claims (the claim state the kubelet's calls change:
// prepare, unprepare, recovery, the stale sweeps, a claim's plan and opaque configs, the CDI
// specs' contents, the node's ComputeDomain label), checkpoint (the claims' record and its one
// decoder), cdi (spec names and files), devices (discovery and publishing: devices, device
// nodes, driver root, NVML, clique), readiness (the view of domains and cliques on the watch
// cache), endpoints (sockets, health, metrics), claimlock (per-claim locks) and failure (error
// kinds and failure reasons). names.go names what the plugin's users read from those.
package kubeletplugin
