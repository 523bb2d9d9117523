package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ComputeDomain asks for an IMEX domain spanning the nodes that the workload claiming its channel
// lands on.
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=cd
// +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep"
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.status`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyNodes`,description="Nodes whose daemon is Ready"
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.totalNodes`,description="Nodes in the domain"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ComputeDomain struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is immutable after creation.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable after creation"
	Spec   ComputeDomainSpec   `json:"spec,omitempty"`
	Status ComputeDomainStatus `json:"status,omitempty"`
}

// ComputeDomainSpec is what the user asks for.
type ComputeDomainSpec struct {
	// NumNodes is the number of nodes readiness waits for. 0 means the domain is Ready as soon as
	// every node that joined is Ready.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	NumNodes int `json:"numNodes"`

	// Channel describes the ResourceClaimTemplate workloads use to claim an IMEX channel.
	Channel *ComputeDomainChannelSpec `json:"channel"`
}

// ComputeDomainChannelSpec describes the workload's channel claim.
type ComputeDomainChannelSpec struct {
	// ResourceClaimTemplate names the template created in the domain's namespace.
	ResourceClaimTemplate ComputeDomainResourceClaimTemplate `json:"resourceClaimTemplate"`

	// AllocationMode is Single (channel 0) or All (all 2048 channels).
	// +optional
	// +kubebuilder:default=Single
	// +kubebuilder:validation:Enum=Single;All
	AllocationMode string `json:"allocationMode,omitempty"`
}

// ComputeDomainResourceClaimTemplate names a ResourceClaimTemplate.
type ComputeDomainResourceClaimTemplate struct {
	// Name of the ResourceClaimTemplate, a DNS subdomain.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// ComputeDomainStatus is written by the controller only.
type ComputeDomainStatus struct {
	// Status is Ready once at least numNodes nodes joined and every one of them is Ready.
	// +optional
	// +kubebuilder:default=NotReady
	// +kubebuilder:validation:Enum=Ready;NotReady
	Status string `json:"status,omitempty"`

	// Nodes lists every node of the domain, one entry per node name. Omitted for domains larger
	// than the limit, whose per-node data lives in their ComputeDomainCliques only.
	//
	// An atomic list, where NVIDIA's CRD has a map keyed by name: the controller is its only
	// writer and writes it whole, so per-entry ownership in server-side apply buys nothing and
	// its managedFields (an entry per node) were half of a large domain's bytes. Names are unique
	// by construction (membership.Compute); the API server no longer checks it.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4096
	Nodes []ComputeDomainNode `json:"nodes,omitempty"`

	// Cliques summarises each clique of the domain.
	// +optional
	// +listType=map
	// +listMapKey=id
	// +kubebuilder:validation:MaxItems=4096
	Cliques []ComputeDomainCliqueSummary `json:"cliques,omitempty"`

	// ReadyNodes is the number of nodes whose daemon is Ready.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ReadyNodes int32 `json:"readyNodes"`

	// TotalNodes is the number of nodes in the domain.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TotalNodes int32 `json:"totalNodes"`

	// Conditions explain why the domain is or is not ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ComputeDomainNode is one node's entry in a ComputeDomain's status.
type ComputeDomainNode struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// +kubebuilder:validation:MaxLength=45
	IPAddress string `json:"ipAddress"`
	// CliqueID is "<clusterUUID>.<cliqueId>", empty for a node without an NVLink fabric.
	// +kubebuilder:validation:MaxLength=128
	CliqueID string `json:"cliqueID"`
	// Index is the node's stable IMEX index within its clique; -1 without a fabric.
	// +optional
	// +kubebuilder:validation:Minimum=-1
	Index int `json:"index"`
	// +optional
	// +kubebuilder:default=NotReady
	// +kubebuilder:validation:Enum=Ready;NotReady
	Status string `json:"status,omitempty"`
}

// ComputeDomainCliqueSummary counts the daemons of one clique.
type ComputeDomainCliqueSummary struct {
	// ID is the clique id; empty for fabric-less nodes.
	// +kubebuilder:validation:MaxLength=128
	ID string `json:"id"`
	// +kubebuilder:validation:Minimum=0
	Ready int32 `json:"ready"`
	// +kubebuilder:validation:Minimum=0
	Total int32 `json:"total"`
}

// ComputeDomainList is a list of ComputeDomains.
//
// +kubebuilder:object:root=true
type ComputeDomainList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ComputeDomain `json:"items"`
}
