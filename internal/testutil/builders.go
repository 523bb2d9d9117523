// Package testutil holds option-style builders of the project's objects for tests.
package testutil

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdv1beta1 "cdplane/api/v1beta1"
)

// ComputeDomainWrapper builds a ComputeDomain.
type ComputeDomainWrapper struct{ cdv1beta1.ComputeDomain }

// MakeComputeDomain starts a ComputeDomain named name whose channel template is "<name>-channel".
func MakeComputeDomain(name string) *ComputeDomainWrapper {
	return &ComputeDomainWrapper{cdv1beta1.ComputeDomain{
		TypeMeta:   metav1.TypeMeta{APIVersion: cdv1beta1.GroupVersion.String(), Kind: "ComputeDomain"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: cdv1beta1.ComputeDomainSpec{
			Channel: &cdv1beta1.ComputeDomainChannelSpec{
				ResourceClaimTemplate: cdv1beta1.ComputeDomainResourceClaimTemplate{Name: name + "-channel"},
			},
		},
	}}
}

// Namespace sets the namespace.
func (w *ComputeDomainWrapper) Namespace(ns string) *ComputeDomainWrapper {
	w.ObjectMeta.Namespace = ns
	return w
}

// NumNodes sets spec.numNodes.
func (w *ComputeDomainWrapper) NumNodes(n int) *ComputeDomainWrapper {
	w.Spec.NumNodes = n
	return w
}

// AllocationMode sets spec.channel.allocationMode.
func (w *ComputeDomainWrapper) AllocationMode(mode string) *ComputeDomainWrapper {
	w.Spec.Channel.AllocationMode = mode
	return w
}

// ClaimTemplate sets spec.channel.resourceClaimTemplate.name.
func (w *ComputeDomainWrapper) ClaimTemplate(name string) *ComputeDomainWrapper {
	w.Spec.Channel.ResourceClaimTemplate.Name = name
	return w
}

// Label sets a label.
func (w *ComputeDomainWrapper) Label(key, value string) *ComputeDomainWrapper {
	if w.Labels == nil {
		w.Labels = map[string]string{}
	}
	w.Labels[key] = value
	return w
}

// Obj returns the built object.
func (w *ComputeDomainWrapper) Obj() *cdv1beta1.ComputeDomain {
	return w.DeepCopy()
}

// CliqueWrapper builds a ComputeDomainClique.
type CliqueWrapper struct{ cdv1beta1.ComputeDomainClique }

// MakeClique starts a ComputeDomainClique.
func MakeClique(name, namespace string) *CliqueWrapper {
	return &CliqueWrapper{cdv1beta1.ComputeDomainClique{
		TypeMeta:   metav1.TypeMeta{APIVersion: cdv1beta1.GroupVersion.String(), Kind: "ComputeDomainClique"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
	}}
}

// Daemon adds a daemon entry.
func (w *CliqueWrapper) Daemon(node, ip, cliqueID string, index int, status string) *CliqueWrapper {
	w.Daemons = append(w.Daemons, cdv1beta1.ComputeDomainDaemonInfo{
		NodeName: node, IPAddress: ip, CliqueID: cliqueID, Index: index, Status: status,
	})
	return w
}

// OwnedBy adds an owner reference.
func (w *CliqueWrapper) OwnedBy(ref metav1.OwnerReference) *CliqueWrapper {
	w.OwnerReferences = append(w.OwnerReferences, ref)
	return w
}

// Obj returns the built object.
func (w *CliqueWrapper) Obj() *cdv1beta1.ComputeDomainClique {
	return w.DeepCopy()
}
