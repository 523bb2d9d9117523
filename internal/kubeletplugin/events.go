package kubeletplugin

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
)

// Reasons of the events the plugin posts about its node.
const (
	// ReasonNVMLUnavailable: NVML cannot be loaded, so the node publishes no devices.
	ReasonNVMLUnavailable = "NVMLUnavailable"
	// ReasonFabricNotReady: the NVLink fabric registration has not completed, so the node
	// publishes no devices (workloads go elsewhere meanwhile).
	ReasonFabricNotReady = "FabricNotReady"
	// ReasonFabricFailed: the NVLink fabric registration failed; no devices.
	ReasonFabricFailed = "FabricFailed"
	// ReasonDiscoveryFailed: the clique cannot be discovered for another reason; no devices.
	ReasonDiscoveryFailed = "CliqueDiscoveryFailed"
	// ReasonDevicesPublished: after one of those, the node's devices are published again.
	ReasonDevicesPublished = "DevicesPublished"
	// ReasonDriverRootIncomplete: the driver root lacks what daemon containers need, so every
	// daemon claim on the node will fail until it is fixed.
	ReasonDriverRootIncomplete = "DriverRootIncomplete"
	// ReasonDriverRootMismatch: the driver root holds another driver than the loaded one.
	ReasonDriverRootMismatch = "DriverRootMismatch"
	// ReasonDriverTooOld: IMEXDaemonsWithDNSNames is on and the loaded driver predates the IMEX
	// that takes host names; every daemon claim on the node is refused.
	ReasonDriverTooOld = "DriverTooOld"
	// ReasonHostIMEXNotReady: host-managed mode, and at start the host IMEX is missing or not
	// READY (its socket, nvidia-imex-ctl, or its answer); channel claims wait for it.
	ReasonHostIMEXNotReady = "HostIMEXNotReady"
)

// nodeEvents posts events about the node's state. An event is regarding the plugin's own pod
// (the plugin may write events only in its driver namespace; an event regarding a Node must live
// in the default namespace, outside every plane) and names the node as its related object, so
// `kubectl get events -n <driver namespace>` and `kubectl describe pod` of the node's plugin
// show it. The broadcaster aggregates repeats and rate-limits. A plugin that does not know its
// pod (no POD_NAME) posts nothing.
type nodeEvents struct {
	rec       events.EventRecorderLogger
	pod, node *corev1.ObjectReference
	stop      func()
}

// newNodeEvents starts the broadcaster; nil when pod is empty.
func newNodeEvents(kube kubernetes.Interface, scheme *runtime.Scheme, namespace, pod string, podUID types.UID, node string) *nodeEvents {
	if pod == "" {
		return nil
	}
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: kube.EventsV1()})
	stopCh := make(chan struct{})
	b.StartRecordingToSink(stopCh)
	return &nodeEvents{
		rec:  b.NewRecorder(scheme, "cdplane-kubelet-plugin"),
		pod:  &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: namespace, Name: pod, UID: podUID},
		node: &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node},
		stop: func() { close(stopCh); b.Shutdown() },
	}
}

// post records one event; nil posts nothing.
func (e *nodeEvents) post(ctx context.Context, eventType, reason, action, format string, args ...any) {
	if e == nil {
		return
	}
	e.rec.WithLogger(klog.FromContext(ctx)).Eventf(e.pod, e.node, eventType, reason, action, "%s", fmt.Sprintf(format, args...))
}

func (e *nodeEvents) shutdown() {
	if e != nil {
		e.stop()
	}
}
