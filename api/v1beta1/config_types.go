package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Kinds of the opaque device configurations.
const (
	ComputeDomainChannelConfigKind = "ComputeDomainChannelConfig"
	ComputeDomainDaemonConfigKind  = "ComputeDomainDaemonConfig"
)

// ComputeDomainChannelConfig is the opaque configuration of a channel claim, set by the controller
// on the workload ResourceClaimTemplate.
//
// +kubebuilder:object:root=true
// +kubebuilder:skipversion
type ComputeDomainChannelConfig struct {
	metav1.TypeMeta `json:",inline"`
	// DomainID is the UID of the ComputeDomain.
	DomainID string `json:"domainID"`
	// AllocationMode is Single or All.
	AllocationMode string `json:"allocationMode,omitempty"`
}

// ComputeDomainDaemonConfig is the opaque configuration of a daemon claim, set by the controller
// on the daemon ResourceClaimTemplate.
//
// +kubebuilder:object:root=true
// +kubebuilder:skipversion
type ComputeDomainDaemonConfig struct {
	metav1.TypeMeta `json:",inline"`
	// DomainID is the UID of the ComputeDomain.
	DomainID string `json:"domainID"`
}

// NewChannelConfig returns a channel config for the domain with the given UID.
func NewChannelConfig(domainID, allocationMode string) *ComputeDomainChannelConfig {
	return &ComputeDomainChannelConfig{
		TypeMeta:       metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: ComputeDomainChannelConfigKind},
		DomainID:       domainID,
		AllocationMode: allocationMode,
	}
}

// NewDaemonConfig returns a daemon config for the domain with the given UID.
func NewDaemonConfig(domainID string) *ComputeDomainDaemonConfig {
	return &ComputeDomainDaemonConfig{
		TypeMeta: metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: ComputeDomainDaemonConfigKind},
		DomainID: domainID,
	}
}
