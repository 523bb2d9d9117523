// Package v1beta1 holds the resource.nvidia.com/v1beta1 API: ComputeDomain, ComputeDomainClique
// and the opaque device configurations of the compute-domain.nvidia.com DRA driver.
//
// Field names and JSON tags match the original ComputeDomain API so that existing manifests apply
// unchanged.
//
// +kubebuilder:object:generate=true
// +kubebuilder:ac:generate=true
// +groupName=resource.nvidia.com
package v1beta1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const (
	// GroupName is the API group of every type in this package.
	GroupName = "resource.nvidia.com"
	// Version is the API version of every type in this package.
	Version = "v1beta1"
)

var (
	// GroupVersion is the group and version of this package.
	GroupVersion = schema.GroupVersion{Group: GroupName, Version: Version}
	// SchemeGroupVersion is GroupVersion under the name generated code expects.
	SchemeGroupVersion = GroupVersion

	// SchemeBuilder registers the types of this package with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion,
		&ComputeDomain{}, &ComputeDomainList{},
		&ComputeDomainClique{}, &ComputeDomainCliqueList{},
		&ComputeDomainChannelConfig{}, &ComputeDomainDaemonConfig{},
	)
	return addMetaTypes(scheme)
}
