// Package status gathers what `cdplane status` shows into plain model structs (Plane, Domain)
// and renders them as text or JSON. Gathering reads the cluster; everything after it is pure, so
// that tests drive the rendering and the "why is this node held back" rules with hand-built
// models and objects.
package status

import "time"

// The JSON field names below are a stable interface for scripts (docs/operations.md lists
// them): fields may be added, never renamed or removed.

// Planes is the output of `cdplane status` without arguments.
type Planes struct {
	// ObservedAt is when the cluster was read.
	ObservedAt time.Time `json:"observedAt"`
	// Planes are sorted: the legacy plane first, then by id.
	Planes []Plane `json:"planes"`
}

// Plane is one control plane: an installed one (its controller Deployment was found in its
// driver namespace) or one that only labels refer to (Installed false).
type Plane struct {
	// ID is the control-plane id; "" for the legacy plane.
	ID string `json:"id"`
	// Legacy is true for the legacy plane (no id).
	Legacy bool `json:"legacy"`
	// Installed is true when the plane's controller Deployment exists in its driver namespace.
	Installed bool `json:"installed"`
	// DriverNamespace is the plane's driver namespace: "cdplane" or "<id>-cdplane".
	DriverNamespace string `json:"driverNamespace"`
	// Version is the controller image's tag, or the Deployment's app.kubernetes.io/version
	// label when the image has no tag; "" when not installed.
	Version string `json:"version"`
	// Controller counts the controller Deployment's replicas.
	Controller Replicas `json:"controller"`
	// Nodes are the plane's nodes: labelled with its id, or, for the legacy plane, those
	// running its kubelet plugin (NodesCountedBy says which).
	Nodes int `json:"nodes"`
	// NodesPluginReady counts those of Nodes whose kubelet-plugin pod is Ready.
	NodesPluginReady int `json:"nodesPluginReady"`
	// NodesCountedBy is "label" (nodes labelled resource.nvidia.com/control-plane-id=<id>) or
	// "kubeletPlugin" (legacy plane: nodes running its kubelet-plugin pods).
	NodesCountedBy string `json:"nodesCountedBy"`
	// Namespaces are the plane's namespaces: labelled with its id (its driver namespace not
	// counted), or, for the legacy plane, unlabelled namespaces that hold its domains
	// (NamespacesCountedBy says which).
	Namespaces int `json:"namespaces"`
	// NamespacesCountedBy is "label" or "domains" (legacy plane).
	NamespacesCountedBy string `json:"namespacesCountedBy"`
	// Domains counts the plane's ComputeDomains by status.status.
	Domains DomainCounts `json:"domains"`
	// Leader is the holder of the controller's leader-election Lease; nil when not installed.
	Leader *Leader `json:"leader,omitempty"`
}

// Replicas counts a Deployment's replicas.
type Replicas struct {
	Desired int32 `json:"desired"`
	Ready   int32 `json:"ready"`
}

// DomainCounts counts domains by status.
type DomainCounts struct {
	Ready int `json:"ready"`
	// NotReady counts every domain whose status is not Ready, including those not reconciled yet.
	NotReady int `json:"notReady"`
}

// Leader is what the controller's leader-election Lease says.
type Leader struct {
	// Lease is the Lease's name (in the driver namespace).
	Lease string `json:"lease"`
	// Election is false when the controller runs with --leader-elect=false (no Lease).
	Election bool `json:"election"`
	// Holder is the leading pod's name; "" when there is no Lease or no holder.
	Holder string `json:"holder"`
	// AcquireTime is when the holder acquired the Lease.
	AcquireTime *time.Time `json:"acquireTime,omitempty"`
	// AgeSeconds is ObservedAt minus AcquireTime, in whole seconds.
	AgeSeconds int64 `json:"ageSeconds"`
	// Expired is true when the holder has not renewed the Lease within its duration.
	Expired bool `json:"expired"`
}

// Domain is the output of `cdplane status -n NS NAME`.
type Domain struct {
	ObservedAt time.Time `json:"observedAt"`
	Namespace  string    `json:"namespace"`
	Name       string    `json:"name"`
	UID        string    `json:"uid"`
	// ControlPlaneID is the domain's plane ("" for the legacy plane).
	ControlPlaneID  string `json:"controlPlaneID"`
	DriverNamespace string `json:"driverNamespace"`
	// Status is status.status: Ready, NotReady, or "" before the controller reported.
	Status     string `json:"status"`
	NumNodes   int    `json:"numNodes"`
	ReadyNodes int32  `json:"readyNodes"`
	TotalNodes int32  `json:"totalNodes"`
	// Membership says where the nodes were read from: "cliques" (ComputeDomainClique objects,
	// gate ComputeDomainCliques on; nodes without a fabric come from status.nodes) or
	// "status.nodes" (no clique exists).
	Membership string `json:"membership"`
	// Cliques are sorted by id; nodes without an NVLink fabric form the clique with id "".
	Cliques []Clique `json:"cliques"`
	// HeldBack lists the nodes that keep the domain from being Ready, or serve it degraded,
	// with why, sorted by node.
	HeldBack   []HeldBack  `json:"heldBack"`
	Conditions []Condition `json:"conditions"`
}

// Clique is one clique's members.
type Clique struct {
	// ID is "<clusterUUID>.<cliqueId>"; "" for nodes without an NVLink fabric.
	ID    string `json:"id"`
	Ready int    `json:"ready"`
	Total int    `json:"total"`
	// Nodes are sorted by index, then name.
	Nodes []Node `json:"nodes"`
}

// Node is one member's entry.
type Node struct {
	Name      string `json:"name"`
	IPAddress string `json:"ipAddress"`
	// Index is the node's IMEX index in its clique; -1 without a fabric.
	Index int `json:"index"`
	// Status is the entry's status: Ready or NotReady.
	Status string `json:"status"`
}

// HeldBack is one node that holds the domain back, and why.
type HeldBack struct {
	Node string `json:"node"`
	// Reason is one of the Reason* constants.
	Reason string `json:"reason"`
	// Message says what was seen and, where it helps, what to do.
	Message string `json:"message"`
}

// Condition is one of the domain's status.conditions.
type Condition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"`
	Reason             string    `json:"reason"`
	Message            string    `json:"message"`
	LastTransitionTime time.Time `json:"lastTransitionTime"`
}

// Reasons of HeldBack, in the order they are looked for: a node gets the first that applies.
const (
	// ReasonBlocked: the daemon labelled its pod resource.nvidia.com/computeDomain.imexBlocked
	// with a value this version does not know (or the NodesBlocked condition says IMEXBlocked).
	ReasonBlocked = "IMEXBlocked"
	// ReasonHostIMEXInUse: a host nvidia-imex holds the node's IMEX session.
	ReasonHostIMEXInUse = "HostIMEXInUse"
	// ReasonFabricError: the node's NVLink fabric registration failed; it serves without fabric.
	ReasonFabricError = "FabricError"
	// ReasonInvalidCliqueLabel: the daemon pod's clique label is not a valid clique id.
	ReasonInvalidCliqueLabel = "InvalidCliqueLabel"
	// ReasonAddressInUse: the daemon pod's address is another member's entry's.
	ReasonAddressInUse = "AddressInUse"
	// ReasonNoDaemonPod: the node serves the domain (a channel claim allocated on it, the
	// domain's node label, or an entry) but runs no daemon pod of it.
	ReasonNoDaemonPod = "NoDaemonPod"
	// ReasonCliqueFull: the node's clique has no free IMEX index.
	ReasonCliqueFull = "CliqueFull"
	// ReasonDaemonNotReady: the daemon pod is not Ready.
	ReasonDaemonNotReady = "DaemonNotReady"
	// ReasonNoChannelClaim: the node carries the domain's label and runs its daemon, but no
	// channel claim of the domain is allocated on it, so it is not a member.
	ReasonNoChannelClaim = "NoChannelClaim"
	// ReasonNotJoined: the daemon pod runs but the node has no entry yet.
	ReasonNotJoined = "NotJoined"
	// ReasonEntryNotReady: the entry is NotReady although the daemon pod is Ready (the
	// controller has not caught up).
	ReasonEntryNotReady = "EntryNotReady"
)
