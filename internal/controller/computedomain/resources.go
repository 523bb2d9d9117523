package computedomain

import (
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/daemonenv"
	"cdplane/internal/plane"
)

// Container and claim names of the daemon pod.
const (
	DaemonContainerName = "compute-domain-daemon"
	DaemonClaimName     = "compute-domain-daemon"
	channelRequestName  = "channel"
	daemonRequestName   = "daemon"
	managedByLabel      = "app.kubernetes.io/managed-by"
	managedByValue      = "cdplane"
)

// ownedLabels are the labels of every object created for a domain: the domain's UID, the
// manager, and for a plane with an id the plane label.
func (r *Reconciler) ownedLabels(cd *cdv1beta1.ComputeDomain) map[string]string {
	return plane.Stamp(r.opts.ControlPlaneID, map[string]string{cdv1beta1.ComputeDomainLabel: string(cd.UID), managedByLabel: managedByValue})
}

// createdFor reports whether an object carries the labels this plane's controller puts on what
// it creates for the domain with this UID.
func (r *Reconciler) createdFor(labels map[string]string, cdUID string) bool {
	return labels[cdv1beta1.ComputeDomainLabel] == cdUID && labels[managedByLabel] == managedByValue &&
		plane.Owns(r.opts.ControlPlaneID, labels)
}

func opaqueConfig(requests []string, params runtime.Object) []resourcev1.DeviceClaimConfiguration {
	raw, err := json.Marshal(params)
	if err != nil {
		panic(fmt.Sprintf("marshalling opaque config: %v", err)) // plain structs always marshal
	}
	return []resourcev1.DeviceClaimConfiguration{{
		Requests: requests,
		DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
			Driver: cdv1beta1.DriverName, Parameters: runtime.RawExtension{Raw: raw},
		}},
	}}
}

// workloadClaimTemplate is the channel ResourceClaimTemplate in the domain's namespace.
func (r *Reconciler) workloadClaimTemplate(cd *cdv1beta1.ComputeDomain) *resourcev1.ResourceClaimTemplate {
	mode := cd.Spec.Channel.AllocationMode
	if mode == "" || r.hostManaged() {
		// A host IMEX serves every domain of the node on the same channels: a domain gets one,
		// never all of them.
		mode = cdv1beta1.AllocationModeSingle
	}
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{
			Name: cd.Spec.Channel.ResourceClaimTemplate.Name, Namespace: cd.Namespace, Labels: r.ownedLabels(cd),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: cdv1beta1.GroupVersion.String(), Kind: "ComputeDomain", Name: cd.Name, UID: cd.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: resourcev1.ResourceClaimTemplateSpec{
			// Claims made from the template carry the domain's labels, so that the controller's
			// cache, scoped by label, holds them; the labels prove nothing (see allocatedNodes).
			ObjectMeta: metav1.ObjectMeta{Labels: r.ownedLabels(cd)},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
				Requests: []resourcev1.DeviceRequest{{
					Name:    channelRequestName,
					Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: cdv1beta1.ChannelDeviceClass, Selectors: r.planeSelectors()},
				}},
				Config: opaqueConfig([]string{channelRequestName}, cdv1beta1.NewChannelConfig(string(cd.UID), mode)),
			}},
		},
	}
}

// daemonClaimTemplate is the daemon ResourceClaimTemplate in the driver namespace.
func (r *Reconciler) daemonClaimTemplate(cd *cdv1beta1.ComputeDomain) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: cdv1beta1.DaemonSetName(string(cd.UID)), Namespace: r.opts.DriverNamespace, Labels: r.ownedLabels(cd)},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{
				Name:    daemonRequestName,
				Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: cdv1beta1.DaemonDeviceClass, Selectors: r.planeSelectors()},
			}},
			Config: opaqueConfig([]string{daemonRequestName}, cdv1beta1.NewDaemonConfig(string(cd.UID))),
		}}},
	}
}

// daemonSet is the per-domain DaemonSet running one daemon on every node labelled for the domain.
// Nothing in it depends on the ComputeDomainCliques gate, so flipping the gate never rolls it.
func (r *Reconciler) daemonSet(cd *cdv1beta1.ComputeDomain) *appsv1.DaemonSet {
	uid := string(cd.UID)
	selector := map[string]string{cdv1beta1.ComputeDomainLabel: uid}
	probe := func(period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{r.opts.DaemonBinary, "check"}}},
			PeriodSeconds:    period,
			TimeoutSeconds:   10,
			FailureThreshold: failures,
		}
	}
	env := daemonenv.Pod{
		DomainUID: uid, DomainName: cd.Name, DomainNamespace: cd.Namespace,
		MaxNodesPerIMEXDomain: r.opts.MaxNodesPerIMEXDomain, LogVerbosity: r.opts.DaemonLogVerbosity,
		FeatureGates: r.opts.DaemonFeatureGates, HostsFile: cdv1beta1.DaemonHostsFile,
	}.EnvVars()
	metrics := daemonenv.Metrics{Port: r.opts.DaemonMetricsPort, ControlPlaneID: r.opts.ControlPlaneID}
	labels := r.ownedLabels(cd)
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: cdv1beta1.DaemonSetName(uid), Namespace: r.opts.DriverNamespace, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: selector},
			UpdateStrategy: r.daemonUpdateStrategy(),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  selector,
					Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					ServiceAccountName:            r.opts.DaemonServiceAccount,
					TerminationGracePeriodSeconds: ptr.To(int64(30)),
					PriorityClassName:             r.opts.DaemonPriorityClass,
					// Every IMEX name resolves from the pod's hosts file (unused slots map to
					// sentinel addresses); ndots:1 keeps any dotted name out of the cluster
					// DNS search list, so that no IMEX lookup ever becomes a burst of queries.
					DNSConfig: &corev1.PodDNSConfig{Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("1")}}},
					Containers: []corev1.Container{{
						Name:    DaemonContainerName,
						Image:   r.opts.DaemonImage,
						Command: []string{r.opts.DaemonBinary, "run"},
						// The metrics endpoint, when on: part of the hash, so that turning it on
						// or moving it reaches live domains by the update strategy.
						Args:  metrics.Args(),
						Ports: metrics.Ports(),
						Env:   env,
						// Probes as on real racks (docs/controller-and-daemon.md, "real IMEX"):
						// a 20-minute start-up window, which an IMEX restarted after an unsafe
						// termination needs to reach recovery quorum; readiness every 10 s, Not
						// Ready after 3 failures in a row, so that one slow answer does not churn
						// the clique; liveness gives a running IMEX the same 20 minutes (60 s x
						// 20, as NVIDIA's driver) to recover from a lost peer before its container
						// is restarted, since a restart ends its memory exports on every other node.
						StartupProbe:   probe(2, 600),
						ReadinessProbe: probe(10, 3),
						LivenessProbe:  probe(60, 20),
						Resources:      corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: DaemonClaimName}}},
					}},
					ResourceClaims: []corev1.PodResourceClaim{{
						Name: DaemonClaimName, ResourceClaimTemplateName: ptr.To(cdv1beta1.DaemonSetName(uid)),
					}},
				},
			},
		},
	}
}

// daemonUpdateStrategy is how a changed daemon template reaches the running daemons of a live
// domain. Replacing a daemon pod stops IMEX on its node, under whatever job runs there.
//
//   - OnDelete (the default): the template is updated, and a running daemon is replaced only when
//     its pod goes — its node's workload ends (the node loses the domain label), a drain, a
//     `kubectl delete pod`, the domain recreated. NVIDIA's controller never changes a live
//     domain's DaemonSet, so no upgrade of it ever restarts a daemon under a job; OnDelete keeps
//     that, while every new daemon pod gets the running version's template.
//   - RollingUpdate: the DaemonSet controller replaces the domain's daemons one node at a time
//     (maxUnavailable 1), each after the previous one is Ready again. maxSurge is 0: a second
//     daemon cannot start on a node beside the first, as the node has one IMEX session.
func (r *Reconciler) daemonUpdateStrategy() appsv1.DaemonSetUpdateStrategy {
	if r.opts.DaemonUpdateStrategy == appsv1.RollingUpdateDaemonSetStrategyType {
		return appsv1.DaemonSetUpdateStrategy{
			Type: appsv1.RollingUpdateDaemonSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDaemonSet{
				MaxUnavailable: ptr.To(intstr.FromInt32(1)),
				MaxSurge:       ptr.To(intstr.FromInt32(0)),
			},
		}
	}
	return appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
}

// CreatedByController reports whether an object carries the labels the controller puts on what
// it creates for a domain (whichever domain).
func CreatedByController(labels map[string]string) bool {
	return labels[cdv1beta1.ComputeDomainLabel] != "" && labels[managedByLabel] == managedByValue
}

// planeSelectors makes a plane's claim templates select only devices its own kubelet plugins
// publish, so the scheduler never places its workloads on another plane's nodes. The legacy
// plane's plugins publish controlPlane "", and its templates select that, so a legacy domain's
// claims never get a device of a named plane's node either.
func (r *Reconciler) planeSelectors() []resourcev1.DeviceSelector {
	return []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
		Expression: fmt.Sprintf("device.attributes[%q].controlPlane == %q", cdv1beta1.DriverName, r.opts.ControlPlaneID),
	}}}
}
