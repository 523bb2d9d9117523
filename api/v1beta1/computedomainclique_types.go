package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ComputeDomainClique holds the membership of one clique of one ComputeDomain. It lives in the
// plane's driver namespace, is named "<cdUID>.<cliqueID>" and is owned by the domain's daemon
// DaemonSet. The controller is its only writer.
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=cdclique
// +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep"
// +kubebuilder:printcolumn:name="Domain",type=string,JSONPath=`.metadata.labels.resource\.nvidia\.com/computeDomain`,description="UID of the ComputeDomain"
// +kubebuilder:printcolumn:name="Clique",type=string,JSONPath=`.metadata.labels.resource\.nvidia\.com/computeDomain\.cliqueID`,description="NVLink clique id"
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.readyDaemons`,description="Daemons whose IMEX is Ready"
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.totalDaemons`,description="Daemons in the clique"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ComputeDomainClique struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// ReadyDaemons counts the entries of Daemons whose status is Ready (for kubectl's columns).
	// +optional
	// +kubebuilder:validation:Minimum=0
	ReadyDaemons int32 `json:"readyDaemons,omitempty"`
	// TotalDaemons counts the entries of Daemons.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TotalDaemons int32 `json:"totalDaemons,omitempty"`

	// Daemons lists the daemons of the clique, one entry per node name.
	//
	// An atomic list, where NVIDIA's CRD has a map keyed by nodeName, for the reasons given on
	// ComputeDomainStatus.Nodes: one writer, written whole, unique by construction.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Daemons []ComputeDomainDaemonInfo `json:"daemons,omitempty"`
}

// ComputeDomainDaemonInfo is one daemon's entry in a clique.
type ComputeDomainDaemonInfo struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName"`
	// +kubebuilder:validation:MaxLength=45
	IPAddress string `json:"ipAddress"`
	// +kubebuilder:validation:MaxLength=128
	CliqueID string `json:"cliqueID"`
	// Index is optional so that readers of the original API keep working.
	// +optional
	// +kubebuilder:validation:Minimum=-1
	Index int `json:"index"`
	// +optional
	// +kubebuilder:default=NotReady
	// +kubebuilder:validation:Enum=Ready;NotReady
	Status string `json:"status,omitempty"`
}

// ComputeDomainCliqueList is a list of ComputeDomainCliques.
//
// +kubebuilder:object:root=true
type ComputeDomainCliqueList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ComputeDomainClique `json:"items"`
}
