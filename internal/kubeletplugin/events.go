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

// Post records one event; nil posts nothing.
func (e *nodeEvents) Post(ctx context.Context, eventType, reason, action, format string, args ...any) {
	if e == nil {
		return
	}
	e.rec.WithLogger(klog.FromContext(ctx)).Eventf(e.pod, e.node, eventType, reason, action, "%s", fmt.Sprintf(format, args...))
}
