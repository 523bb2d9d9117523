// Package testutil holds option-style builders of the project's objects for tests.
package testutil

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

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

// UID sets metadata.uid.
func (w *ComputeDomainWrapper) UID(uid types.UID) *ComputeDomainWrapper {
	w.ObjectMeta.UID = uid
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

// Label sets a label.
func (w *CliqueWrapper) Label(key, value string) *CliqueWrapper {
	setLabel(&w.Labels, key, value)
	return w
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

// ControllerRef is the owner reference a controller sets on what it creates: controller and
// blockOwnerDeletion true.
func ControllerRef(apiVersion, kind, name string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: apiVersion, Kind: kind, Name: name, UID: uid,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}
}

func setLabel(m *map[string]string, key, value string) {
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[key] = value
}

// PodWrapper builds a Pod.
type PodWrapper struct{ corev1.Pod }

// MakePod starts a Pod with one container, "main", running image "pause".
func MakePod(name, namespace string) *PodWrapper {
	return &PodWrapper{corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "pause"}}},
	}}
}

// GenerateName sets metadata.generateName and clears the name.
func (w *PodWrapper) GenerateName(prefix string) *PodWrapper {
	w.Name, w.ObjectMeta.GenerateName = "", prefix
	return w
}

// UID sets metadata.uid.
func (w *PodWrapper) UID(uid types.UID) *PodWrapper {
	w.ObjectMeta.UID = uid
	return w
}

// Label sets a label.
func (w *PodWrapper) Label(key, value string) *PodWrapper {
	setLabel(&w.Labels, key, value)
	return w
}

// Annotation sets an annotation.
func (w *PodWrapper) Annotation(key, value string) *PodWrapper {
	setLabel(&w.Annotations, key, value)
	return w
}

// OwnedBy adds an owner reference.
func (w *PodWrapper) OwnedBy(ref metav1.OwnerReference) *PodWrapper {
	w.OwnerReferences = append(w.OwnerReferences, ref)
	return w
}

// Created sets metadata.creationTimestamp.
func (w *PodWrapper) Created(t time.Time) *PodWrapper {
	w.CreationTimestamp = metav1.NewTime(t)
	return w
}

// Terminating sets metadata.deletionTimestamp, as the apiserver does when a pod with a grace
// period is deleted.
func (w *PodWrapper) Terminating(t time.Time) *PodWrapper {
	w.DeletionTimestamp = ptr.To(metav1.NewTime(t))
	return w
}

// NodeName sets spec.nodeName: the pod is bound to the node.
func (w *PodWrapper) NodeName(node string) *PodWrapper {
	w.Spec.NodeName = node
	return w
}

// NodeSelector sets one entry of spec.nodeSelector.
func (w *PodWrapper) NodeSelector(key, value string) *PodWrapper {
	setLabel(&w.Spec.NodeSelector, key, value)
	return w
}

// ServiceAccount sets spec.serviceAccountName.
func (w *PodWrapper) ServiceAccount(name string) *PodWrapper {
	w.Spec.ServiceAccountName = name
	return w
}

// Image sets the image of the first container.
func (w *PodWrapper) Image(image string) *PodWrapper {
	w.Spec.Containers[0].Image = image
	return w
}

// Containers replaces the containers.
func (w *PodWrapper) Containers(containers ...corev1.Container) *PodWrapper {
	w.Spec.Containers = containers
	return w
}

// TerminationGracePeriod sets spec.terminationGracePeriodSeconds.
func (w *PodWrapper) TerminationGracePeriod(seconds int64) *PodWrapper {
	w.Spec.TerminationGracePeriodSeconds = ptr.To(seconds)
	return w
}

// Claim adds a pod claim referring to the ResourceClaim claimName, used by the first container.
func (w *PodWrapper) Claim(name, claimName string) *PodWrapper {
	return w.podClaim(corev1.PodResourceClaim{Name: name, ResourceClaimName: ptr.To(claimName)})
}

// ClaimFromTemplate adds a pod claim made from the ResourceClaimTemplate template, used by the
// first container.
func (w *PodWrapper) ClaimFromTemplate(name, template string) *PodWrapper {
	return w.podClaim(corev1.PodResourceClaim{Name: name, ResourceClaimTemplateName: ptr.To(template)})
}

func (w *PodWrapper) podClaim(c corev1.PodResourceClaim) *PodWrapper {
	w.Spec.ResourceClaims = append(w.Spec.ResourceClaims, c)
	if len(w.Spec.Containers) > 0 {
		res := &w.Spec.Containers[0].Resources
		res.Claims = append(res.Claims, corev1.ResourceClaim{Name: c.Name})
	}
	return w
}

// ClaimStatus adds a status.resourceClaimStatuses entry, as the resource claim controller
// records the claim it made for a template; an empty claimName records that none is needed.
func (w *PodWrapper) ClaimStatus(name, claimName string) *PodWrapper {
	s := corev1.PodResourceClaimStatus{Name: name}
	if claimName != "" {
		s.ResourceClaimName = ptr.To(claimName)
	}
	w.Status.ResourceClaimStatuses = append(w.Status.ResourceClaimStatuses, s)
	return w
}

// PodIP sets status.podIP (and status.podIPs).
func (w *PodWrapper) PodIP(ip string) *PodWrapper {
	w.Status.PodIP = ip
	w.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	return w
}

// Phase sets status.phase.
func (w *PodWrapper) Phase(p corev1.PodPhase) *PodWrapper {
	w.Status.Phase = p
	return w
}

// Ready sets the Ready condition, True or False.
func (w *PodWrapper) Ready(ready bool) *PodWrapper {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	for i := range w.Status.Conditions {
		if w.Status.Conditions[i].Type == corev1.PodReady {
			w.Status.Conditions[i].Status = status
			return w
		}
	}
	w.Status.Conditions = append(w.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: status})
	return w
}

// Obj returns the built object.
func (w *PodWrapper) Obj() *corev1.Pod {
	return w.DeepCopy()
}

// ResourceClaimWrapper builds a ResourceClaim.
type ResourceClaimWrapper struct{ resourcev1.ResourceClaim }

// MakeResourceClaim starts a ResourceClaim without requests, not allocated.
func MakeResourceClaim(name, namespace string) *ResourceClaimWrapper {
	return &ResourceClaimWrapper{resourcev1.ResourceClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourcev1.SchemeGroupVersion.String(), Kind: "ResourceClaim"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
	}}
}

// UID sets metadata.uid.
func (w *ResourceClaimWrapper) UID(uid types.UID) *ResourceClaimWrapper {
	w.ObjectMeta.UID = uid
	return w
}

// Label sets a label.
func (w *ResourceClaimWrapper) Label(key, value string) *ResourceClaimWrapper {
	setLabel(&w.Labels, key, value)
	return w
}

// Annotation sets an annotation.
func (w *ResourceClaimWrapper) Annotation(key, value string) *ResourceClaimWrapper {
	setLabel(&w.Annotations, key, value)
	return w
}

// OwnedBy adds an owner reference.
func (w *ResourceClaimWrapper) OwnedBy(ref metav1.OwnerReference) *ResourceClaimWrapper {
	w.OwnerReferences = append(w.OwnerReferences, ref)
	return w
}

// Request adds a request for exactly one device of class deviceClass, with CEL selectors.
func (w *ResourceClaimWrapper) Request(name, deviceClass string, selectors ...string) *ResourceClaimWrapper {
	req := resourcev1.DeviceRequest{Name: name, Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: deviceClass}}
	for _, s := range selectors {
		req.Exactly.Selectors = append(req.Exactly.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: s}})
	}
	w.Spec.Devices.Requests = append(w.Spec.Devices.Requests, req)
	return w
}

// Config adds an opaque config of driver, with raw JSON parameters, to spec.devices.config;
// no requests means it applies to all.
func (w *ResourceClaimWrapper) Config(driver, raw string, requests ...string) *ResourceClaimWrapper {
	w.Spec.Devices.Config = append(w.Spec.Devices.Config, resourcev1.DeviceClaimConfiguration{
		Requests: requests, DeviceConfiguration: opaqueDeviceConfig(driver, raw),
	})
	return w
}

// Allocated marks the claim allocated (an empty allocation until Device adds results).
func (w *ResourceClaimWrapper) Allocated() *ResourceClaimWrapper {
	if w.Status.Allocation == nil {
		w.Status.Allocation = &resourcev1.AllocationResult{}
	}
	return w
}

// Device adds an allocation result: device of driver from pool, for request.
func (w *ResourceClaimWrapper) Device(request, driver, pool, device string) *ResourceClaimWrapper {
	w.Allocated()
	d := &w.Status.Allocation.Devices
	d.Results = append(d.Results, resourcev1.DeviceRequestAllocationResult{Request: request, Driver: driver, Pool: pool, Device: device})
	return w
}

// AllocatedConfig adds an opaque config of driver to the allocation, as the scheduler copies
// it from the claim (source FromClaim) or its DeviceClass (FromClass); no requests means it
// applies to all.
func (w *ResourceClaimWrapper) AllocatedConfig(source resourcev1.AllocationConfigSource, driver, raw string, requests ...string) *ResourceClaimWrapper {
	w.Allocated()
	d := &w.Status.Allocation.Devices
	d.Config = append(d.Config, resourcev1.DeviceAllocationConfiguration{
		Source: source, Requests: requests, DeviceConfiguration: opaqueDeviceConfig(driver, raw),
	})
	return w
}

// NodeName sets the allocation's node selector to the node named (a metadata.name field
// selector), as the scheduler writes it for a device of a node-local pool.
func (w *ResourceClaimWrapper) NodeName(node string) *ResourceClaimWrapper {
	w.Allocated()
	w.Status.Allocation.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
		Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
	}}}}}
	return w
}

// ReservedFor adds a consumer, a pod, to status.reservedFor.
func (w *ResourceClaimWrapper) ReservedFor(podName string, podUID types.UID) *ResourceClaimWrapper {
	w.Status.ReservedFor = append(w.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: podName, UID: podUID})
	return w
}

// Obj returns the built object.
func (w *ResourceClaimWrapper) Obj() *resourcev1.ResourceClaim {
	return w.DeepCopy()
}

func opaqueDeviceConfig(driver, raw string) resourcev1.DeviceConfiguration {
	return resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
		Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(raw)},
	}}
}

// NodeWrapper builds a Node.
type NodeWrapper struct{ corev1.Node }

// MakeNode starts a Node.
func MakeNode(name string) *NodeWrapper {
	return &NodeWrapper{corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}}
}

// UID sets metadata.uid.
func (w *NodeWrapper) UID(uid types.UID) *NodeWrapper {
	w.ObjectMeta.UID = uid
	return w
}

// Label sets a label.
func (w *NodeWrapper) Label(key, value string) *NodeWrapper {
	setLabel(&w.Labels, key, value)
	return w
}

// Taint adds a taint.
func (w *NodeWrapper) Taint(key, value string, effect corev1.TaintEffect) *NodeWrapper {
	w.Spec.Taints = append(w.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
	return w
}

// InternalIP adds an InternalIP address.
func (w *NodeWrapper) InternalIP(ip string) *NodeWrapper {
	w.Status.Addresses = append(w.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	return w
}

// Ready sets the Ready condition, True or False.
func (w *NodeWrapper) Ready(ready bool) *NodeWrapper {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	for i := range w.Status.Conditions {
		if w.Status.Conditions[i].Type == corev1.NodeReady {
			w.Status.Conditions[i].Status = status
			return w
		}
	}
	w.Status.Conditions = append(w.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: status})
	return w
}

// Obj returns the built object.
func (w *NodeWrapper) Obj() *corev1.Node {
	return w.DeepCopy()
}

// DaemonSetWrapper builds a DaemonSet.
type DaemonSetWrapper struct{ appsv1.DaemonSet }

// MakeDaemonSet starts a DaemonSet whose pods have one container, "main", running image
// "pause"; it has no selector until Selector sets one.
func MakeDaemonSet(name, namespace string) *DaemonSetWrapper {
	return &DaemonSetWrapper{appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "pause"}}},
		}},
	}}
}

// UID sets metadata.uid.
func (w *DaemonSetWrapper) UID(uid types.UID) *DaemonSetWrapper {
	w.ObjectMeta.UID = uid
	return w
}

// Label sets a label of the DaemonSet (not of its pods: see PodLabel).
func (w *DaemonSetWrapper) Label(key, value string) *DaemonSetWrapper {
	setLabel(&w.Labels, key, value)
	return w
}

// PodLabel sets a label of the pod template.
func (w *DaemonSetWrapper) PodLabel(key, value string) *DaemonSetWrapper {
	setLabel(&w.Spec.Template.Labels, key, value)
	return w
}

// Selector adds key=value to the selector's matchLabels and to the pod template's labels, so
// that the DaemonSet stays valid.
func (w *DaemonSetWrapper) Selector(key, value string) *DaemonSetWrapper {
	if w.Spec.Selector == nil {
		w.Spec.Selector = &metav1.LabelSelector{}
	}
	setLabel(&w.Spec.Selector.MatchLabels, key, value)
	return w.PodLabel(key, value)
}

// OwnedBy adds an owner reference.
func (w *DaemonSetWrapper) OwnedBy(ref metav1.OwnerReference) *DaemonSetWrapper {
	w.OwnerReferences = append(w.OwnerReferences, ref)
	return w
}

// NodeSelector sets one entry of the pods' nodeSelector.
func (w *DaemonSetWrapper) NodeSelector(key, value string) *DaemonSetWrapper {
	setLabel(&w.Spec.Template.Spec.NodeSelector, key, value)
	return w
}

// Toleration adds a toleration to the pods.
func (w *DaemonSetWrapper) Toleration(t corev1.Toleration) *DaemonSetWrapper {
	w.Spec.Template.Spec.Tolerations = append(w.Spec.Template.Spec.Tolerations, t)
	return w
}

// ServiceAccount sets the pods' serviceAccountName.
func (w *DaemonSetWrapper) ServiceAccount(name string) *DaemonSetWrapper {
	w.Spec.Template.Spec.ServiceAccountName = name
	return w
}

// PriorityClass sets the pods' priorityClassName.
func (w *DaemonSetWrapper) PriorityClass(name string) *DaemonSetWrapper {
	w.Spec.Template.Spec.PriorityClassName = name
	return w
}

// TerminationGracePeriod sets the pods' terminationGracePeriodSeconds.
func (w *DaemonSetWrapper) TerminationGracePeriod(seconds int64) *DaemonSetWrapper {
	w.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(seconds)
	return w
}

// Image sets the image of the pods' first container.
func (w *DaemonSetWrapper) Image(image string) *DaemonSetWrapper {
	w.Spec.Template.Spec.Containers[0].Image = image
	return w
}

// Containers replaces the pods' containers.
func (w *DaemonSetWrapper) Containers(containers ...corev1.Container) *DaemonSetWrapper {
	w.Spec.Template.Spec.Containers = containers
	return w
}

// ClaimFromTemplate adds a pod claim made from the ResourceClaimTemplate template, used by the
// first container.
func (w *DaemonSetWrapper) ClaimFromTemplate(name, template string) *DaemonSetWrapper {
	spec := &w.Spec.Template.Spec
	spec.ResourceClaims = append(spec.ResourceClaims, corev1.PodResourceClaim{Name: name, ResourceClaimTemplateName: ptr.To(template)})
	if len(spec.Containers) > 0 {
		res := &spec.Containers[0].Resources
		res.Claims = append(res.Claims, corev1.ResourceClaim{Name: name})
	}
	return w
}

// NumberReady sets the status counts: desired pods scheduled and how many are ready.
func (w *DaemonSetWrapper) NumberReady(desired, ready int32) *DaemonSetWrapper {
	w.Status.DesiredNumberScheduled, w.Status.CurrentNumberScheduled, w.Status.NumberReady = desired, desired, ready
	return w
}

// Obj returns the built object.
func (w *DaemonSetWrapper) Obj() *appsv1.DaemonSet {
	return w.DeepCopy()
}
