package v1beta1

// Driver, device classes and well-known names.
const (
	// DriverName is the DRA driver of ComputeDomains.
	DriverName = "compute-domain.nvidia.com"
	// ChannelDeviceClass is the DeviceClass of the workload channel claim.
	ChannelDeviceClass = "compute-domain-default-channel.nvidia.com"
	// DaemonDeviceClass is the DeviceClass of the daemon claim.
	DaemonDeviceClass = "compute-domain-daemon.nvidia.com"

	// Finalizer is set on every ComputeDomain by the controller.
	Finalizer = "resource.nvidia.com/computeDomain"

	// ComputeDomainLabel is set on nodes serving a domain, on the daemon pods and on every object
	// created for a domain; the value is the domain's UID.
	ComputeDomainLabel = "resource.nvidia.com/computeDomain"
	// CliqueIDLabel carries a clique id: on daemon pods (set by the daemon) and on cliques.
	CliqueIDLabel = "resource.nvidia.com/computeDomain.cliqueID"
	// IMEXBlockedLabel is set by a daemon on its own pod when IMEX cannot run on its node for a
	// reason retrying does not cure; the value is the reason (IMEXBlockedHostIMEXInUse). The
	// controller reports such nodes in the NodesBlocked condition.
	IMEXBlockedLabel = "resource.nvidia.com/computeDomain.imexBlocked"
	// IMEXBlockedHostIMEXInUse: the node's IMEX session is held by another nvidia-imex (a host
	// nvidia-imex.service); the kernel allows one per node and IMEX fails with NV_ERR_IN_USE.
	IMEXBlockedHostIMEXInUse = "HostIMEXInUse"
	// IMEXBlockedFabricError: the node's NVLink fabric registration failed; with
	// CrashOnNVLinkFabricErrors off it serves as a node without fabric (no IMEX).
	IMEXBlockedFabricError = "FabricError"
	// ControlPlaneLabel marks namespaces, nodes and objects owned by a control plane.
	ControlPlaneLabel = "resource.nvidia.com/control-plane-id"
	// GPUCliqueNodeLabel optionally advertises a node's clique.
	GPUCliqueNodeLabel = "nvidia.com/gpu.clique"
	// MembershipAnnotation is set on every ComputeDomain by cdplane's controller: where it keeps
	// the domain's membership, MembershipInCliques or MembershipInStatus. Kubelet plugins, which
	// watch domains' metadata only, read status.nodes when it says so, and never when it says
	// cliques; without it (another controller) they fall back to status.nodes after waiting.
	MembershipAnnotation = "resource.nvidia.com/computeDomain.membership"
	// MembershipInCliques: in ComputeDomainClique objects (ComputeDomainCliques on).
	MembershipInCliques = "cliques"
	// MembershipInStatus: in the domain's status.nodes (ComputeDomainCliques off, or host-managed IMEX).
	MembershipInStatus = "status"
)

// Allocation modes of a channel claim.
const (
	AllocationModeSingle = "Single"
	AllocationModeAll    = "All"
)

// Values of ComputeDomainStatus.Status and of node and daemon entries.
const (
	StatusReady    = "Ready"
	StatusNotReady = "NotReady"
)

// Limits of the API.
const (
	// MaxStatusNodes is the most entries ComputeDomain.status.nodes holds.
	MaxStatusNodes = 4096
	// MaxDaemonsPerClique is the most entries a ComputeDomainClique holds.
	MaxDaemonsPerClique = 256
	// FabriclessIndex is the index of a node without an NVLink fabric.
	FabriclessIndex = -1
	// MaxStatusBytes bounds the estimated size of what the controller writes into a
	// ComputeDomain's status (nodes, clique summary, conditions, and the managed-fields entries
	// server-side apply records for each), so that the object stays under etcd's default request
	// limit of 1.5 MiB (1,572,864 bytes) with room for metadata: annotations alone may take
	// 256 KiB, their managed fields as much again. status.nodes is bounded by MaxStatusNodes
	// entries and by this size, whichever is reached first (see docs/controller-and-daemon.md,
	// "Status size").
	MaxStatusBytes = 960 * 1024
)

// Condition types of a ComputeDomain.
const (
	// ConditionReady summarises status.status with a reason and a message.
	ConditionReady = "Ready"
	// ConditionResourcesCreated says whether the domain's ResourceClaimTemplates and DaemonSet exist.
	ConditionResourcesCreated = "ResourcesCreated"
	// ConditionNodesInStatus says whether per-node data is in status.nodes or only in cliques.
	ConditionNodesInStatus = "NodesInStatus"
	// ConditionNodesWithheld is True while nodes are kept out of the domain because their
	// daemon pod carries a clique label no clique can be named after (reason
	// InvalidCliqueLabel) or an address another member holds (AddressInUse; both:
	// NodesWithheld); the message names the nodes and values.
	ConditionNodesWithheld = "NodesWithheld"
	// ConditionNodesBlocked is True while the daemons of some nodes cannot run IMEX for a
	// reason retrying does not cure (their pods carry IMEXBlockedLabel); the reason says why
	// (HostIMEXInUse) and the message names the nodes.
	ConditionNodesBlocked = "NodesBlocked"
)

// Condition reasons of a ComputeDomain.
const (
	ReasonAllNodesReady   = "AllNodesReady"
	ReasonWaitingForNodes = "WaitingForNodes"
	ReasonDaemonsNotReady = "DaemonsNotReady"
	ReasonCliqueFull      = "CliqueFull"
	ReasonCreated         = "Created"
	ReasonNameClash       = "NameClash"
	ReasonCreateFailed    = "CreateFailed"
	ReasonNodesListed     = "NodesListed"
	ReasonTooManyNodes    = "TooManyNodesForStatus"
	ReasonDeleting        = "Deleting"
	// ReasonFabricError: the nodes named in NodesBlocked serve without NVLink fabric because
	// their fabric registration failed.
	ReasonFabricError = IMEXBlockedFabricError
	// ReasonInvalidCliqueLabel: a daemon pod's clique label is not a valid clique id.
	ReasonInvalidCliqueLabel = "InvalidCliqueLabel"
	// ReasonAddressInUse: a daemon pod's address is another member's (NodesWithheld).
	ReasonAddressInUse = "AddressInUse"
	// ReasonNodesWithheld: nodes are withheld for more than one reason (NodesWithheld).
	ReasonNodesWithheld = "NodesWithheld"
	// ReasonNoneWithheld: no node is withheld.
	ReasonNoneWithheld = "NoneWithheld"
	// ReasonHostIMEXInUse: a host nvidia-imex service holds the IMEX session of the nodes named
	// (NodesBlocked).
	ReasonHostIMEXInUse = IMEXBlockedHostIMEXInUse
	// ReasonIMEXBlocked: daemons report IMEX blocked for a reason this version does not know.
	ReasonIMEXBlocked = "IMEXBlocked"
	// ReasonNoneBlocked: no daemon reports IMEX blocked.
	ReasonNoneBlocked = "NoneBlocked"
	// ReasonStatusFull: with ComputeDomainCliques off, membership lives in status.nodes only
	// and it holds as many entries as fit; new nodes wait (Ready) and the NodesInStatus
	// condition says so. Members already listed are never dropped.
	ReasonStatusFull = "StatusFull"
	// ReasonFabriclessOnly: above the status size, status.nodes lists only the nodes without a
	// fabric (they have no clique), so that they still become Ready.
	ReasonFabriclessOnly = "FabriclessNodesOnly"
)
