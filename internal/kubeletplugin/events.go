package kubeletplugin

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	cdv1beta1 "cdplane/api/v1beta1"
)

// Reasons of the events the plugin posts about its node (the pods' are in podevents.go).
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

// startEvents starts the plugin's event broadcaster (events.k8s.io/v1, aggregating repeats
// into series) and returns its recorder and the function that stops it. Every event reports
// controller cdv1beta1.DriverName and instance node: client-go would name the host (the plugin
// pod), and the admission policy that bounds the plugin's events admits only its node's name
// there (nodeInstanceSink).
func startEvents(kube kubernetes.Interface, scheme *runtime.Scheme, node string) (events.EventRecorderLogger, func()) {
	b := events.NewBroadcaster(nodeInstanceSink{EventSink: &events.EventSinkImpl{Interface: kube.EventsV1()}, node: node})
	stopCh := make(chan struct{})
	b.StartRecordingToSink(stopCh)
	return b.NewRecorder(scheme, cdv1beta1.DriverName), func() { close(stopCh); b.Shutdown() }
}

// nodeInstanceSink writes events with reportingInstance set to the node's name. A series
// update is a patch of its count and last time only, so the event it patches keeps the name.
type nodeInstanceSink struct {
	events.EventSink
	node string
}

func (s nodeInstanceSink) Create(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	ev = ev.DeepCopy()
	ev.ReportingInstance = s.node
	return s.EventSink.Create(ctx, ev)
}

func (s nodeInstanceSink) Update(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	ev = ev.DeepCopy()
	ev.ReportingInstance = s.node
	return s.EventSink.Update(ctx, ev)
}

// nodeEvents posts events about the node's state. An event is regarding the plugin's own pod
// (an event regarding a Node must live in the default namespace, outside every plane; and the
// admission policy bounding the plugin's events admits only events regarding pods) and names
// the node as its related object, so `kubectl get events -n <driver namespace>` and `kubectl
// describe pod` of the node's plugin show it. The broadcaster aggregates repeats. A plugin that
// does not know its pod (no POD_NAME) posts nothing.
type nodeEvents struct {
	rec       events.EventRecorderLogger
	pod, node *corev1.ObjectReference
}

// newNodeEvents returns the node's events posted through rec; nil when pod is empty.
func newNodeEvents(rec events.EventRecorderLogger, namespace, pod string, podUID types.UID, node string) *nodeEvents {
	if pod == "" {
		return nil
	}
	return &nodeEvents{
		rec:  rec,
		pod:  &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: namespace, Name: pod, UID: podUID},
		node: &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node},
	}
}

// post records one event; nil posts nothing.
func (e *nodeEvents) post(ctx context.Context, eventType, reason, action, format string, args ...any) {
	if e == nil {
		return
	}
	e.rec.WithLogger(klog.FromContext(ctx)).Eventf(e.pod, e.node, eventType, reason, action, "%s", fmt.Sprintf(format, args...))
}
