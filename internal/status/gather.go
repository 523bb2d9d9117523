package status

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubectl/pkg/util/podutils"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/lifecycle"
	"cdplane/internal/plane"
	"cdplane/internal/scheme"
)

// maxEventLookups bounds how many not-ready daemon pods get their events read (one request each).
const maxEventLookups = 20

// GatherPlanes reads every control plane: the planes' controller Deployments (any namespace),
// nodes and namespaces (metadata only), every ComputeDomain, and for each installed plane its
// kubelet-plugin pods and its leader-election Lease.
func GatherPlanes(ctx context.Context, c client.Reader, now time.Time) (Planes, error) {
	in := PlanesInput{PluginPods: map[string][]corev1.Pod{}, Leases: map[string]*coordinationv1.Lease{}, Now: now}
	deps := &appsv1.DeploymentList{}
	if err := c.List(ctx, deps, client.MatchingLabels{nameLabel: controllerLegacyName, partOfLabel: partOfValue}); err != nil {
		return Planes{}, fmt.Errorf("listing the planes' controller Deployments: %w", err)
	}
	in.Controllers = deps.Items
	var err error
	if in.Nodes, err = listMetadata(ctx, c, "NodeList"); err != nil {
		return Planes{}, err
	}
	if in.Namespaces, err = listMetadata(ctx, c, "NamespaceList"); err != nil {
		return Planes{}, err
	}
	cds := &cdv1beta1.ComputeDomainList{}
	if err := c.List(ctx, cds); err != nil && !meta.IsNoMatchError(err) && !apierrors.IsNotFound(err) {
		return Planes{}, fmt.Errorf("listing ComputeDomains: %w", err)
	}
	in.Domains = cds.Items
	for i := range deps.Items {
		d := &deps.Items[i]
		id, ok := PlaneOf(d)
		if !ok {
			continue
		}
		release, ns := lifecycle.PlaneRelease(id)
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{nameLabel: kubeletPluginLegacyName, instanceLabel: release}); err != nil {
			return Planes{}, fmt.Errorf("listing the kubelet-plugin pods of %s: %w", describe(id), err)
		}
		in.PluginPods[id] = pods.Items
		name, election := LeaseOf(id, d)
		if !election {
			continue
		}
		lease := &coordinationv1.Lease{}
		switch err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, lease); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return Planes{}, fmt.Errorf("reading the leader-election Lease %s/%s: %w", ns, name, err)
		default:
			in.Leases[id] = lease
		}
	}
	return BuildPlanes(in), nil
}

func listMetadata(ctx context.Context, c client.Reader, kind string) ([]metav1.PartialObjectMetadata, error) {
	list := scheme.MetaList(corev1.SchemeGroupVersion.WithKind(kind))
	if err := c.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing %ss: %w", strings.ToLower(strings.TrimSuffix(kind, "List")), err)
	}
	return list.Items, nil
}

// GatherDomain reads one ComputeDomain and what explains its state: its cliques, daemon pods
// and their latest Warning events, the nodes carrying its label, its allocated channel claims,
// and its plane's --max-nodes-per-imex-domain.
func GatherDomain(ctx context.Context, c client.Reader, namespace, name string, now time.Time) (Domain, error) {
	cd := &cdv1beta1.ComputeDomain{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, cd); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return Domain{}, fmt.Errorf("ComputeDomain %s/%s not found", namespace, name)
		}
		return Domain{}, fmt.Errorf("reading ComputeDomain %s/%s: %w", namespace, name, err)
	}
	id := cd.Labels[cdv1beta1.ControlPlaneLabel]
	_, driverNS := lifecycle.PlaneRelease(id)
	uid := string(cd.UID)
	in := DomainInput{Domain: cd, DriverNamespace: driverNS, Now: now, PodMessages: map[string]string{}}

	cliques := &cdv1beta1.ComputeDomainCliqueList{}
	if err := c.List(ctx, cliques, client.InNamespace(driverNS), client.MatchingLabels{cdv1beta1.ComputeDomainLabel: uid}); err != nil &&
		!meta.IsNoMatchError(err) && !apierrors.IsNotFound(err) {
		return Domain{}, fmt.Errorf("listing the domain's cliques in %s: %w", driverNS, err)
	}
	in.Cliques = cliques.Items

	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(driverNS), client.MatchingLabels{cdv1beta1.ComputeDomainLabel: uid}); err != nil {
		return Domain{}, fmt.Errorf("listing the domain's daemon pods in %s: %w", driverNS, err)
	}
	for _, p := range pods.Items {
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.Kind == "DaemonSet" && ref.Name == cdv1beta1.DaemonSetName(uid) {
			in.DaemonPods = append(in.DaemonPods, p)
		}
	}

	nodes := scheme.MetaList(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := c.List(ctx, nodes, client.MatchingLabels{cdv1beta1.ComputeDomainLabel: uid}); err != nil {
		return Domain{}, fmt.Errorf("listing the nodes labelled for the domain: %w", err)
	}
	for _, n := range nodes.Items {
		in.LabelledNodes = append(in.LabelledNodes, n.Name)
	}

	claims := &resourcev1.ResourceClaimList{}
	switch err := c.List(ctx, claims, client.InNamespace(namespace), client.MatchingLabels{cdv1beta1.ComputeDomainLabel: uid}); {
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
		// Not served, or not readable: the rules that need claims are skipped.
	case err != nil:
		return Domain{}, fmt.Errorf("listing the domain's channel claims: %w", err)
	default:
		in.ClaimsKnown = true
		for i := range claims.Items {
			if n := ClaimNode(&claims.Items[i]); n != "" {
				in.ClaimNodes = append(in.ClaimNodes, n)
			}
		}
	}

	dep := &appsv1.Deployment{}
	switch err := c.Get(ctx, client.ObjectKey{Namespace: driverNS, Name: plane.Name(id, controllerLegacyName)}, dep); {
	case apierrors.IsNotFound(err):
		in.MaxNodesPerClique = MaxNodesPerClique(nil)
	case err != nil:
		return Domain{}, fmt.Errorf("reading the plane's controller Deployment: %w", err)
	default:
		in.MaxNodesPerClique = MaxNodesPerClique(dep)
	}

	if err := podMessages(ctx, c, driverNS, in.DaemonPods, in.PodMessages); err != nil {
		return Domain{}, err
	}
	return BuildDomain(in), nil
}

// podMessages records, for each daemon pod that is not Ready (at most maxEventLookups), its latest
// Warning event: the kubelet's readiness-probe failure ("Unhealthy") carries the message of
// `cdplane-daemon check`, and a daemon that finds IMEX blocked posts one of its own.
func podMessages(ctx context.Context, c client.Reader, ns string, pods []corev1.Pod, into map[string]string) error {
	looked := 0
	for i := range pods {
		p := &pods[i]
		if podutils.IsPodReady(p) || looked >= maxEventLookups {
			continue
		}
		looked++
		events := &corev1.EventList{}
		if err := c.List(ctx, events, client.InNamespace(ns), client.MatchingFields{"involvedObject.name": p.Name}); err != nil {
			if apierrors.IsForbidden(err) {
				return nil
			}
			return fmt.Errorf("listing the events of pod %s/%s: %w", ns, p.Name, err)
		}
		// Events of an earlier pod of the same name do not count.
		mine := slices.DeleteFunc(events.Items, func(e corev1.Event) bool { return e.InvolvedObject.UID != p.UID })
		if m := LatestWarning(mine); m != "" {
			into[p.Name] = m
		}
	}
	return nil
}

// LatestWarning returns "<reason>: <message>" of the latest Warning event, on one line; "" when
// there is none.
func LatestWarning(events []corev1.Event) string {
	var warnings []corev1.Event
	for _, e := range events {
		if e.Type == corev1.EventTypeWarning {
			warnings = append(warnings, e)
		}
	}
	if len(warnings) == 0 {
		return ""
	}
	latest := slices.MaxFunc(warnings, func(a, b corev1.Event) int { return eventTime(&a).Compare(eventTime(&b)) })
	return latest.Reason + ": " + strings.Join(strings.Fields(latest.Message), " ")
}

// eventTime is when an event last happened, as its reporter says: the latest of its last
// timestamp, event time and series' last observation; its creation when it says nothing.
func eventTime(e *corev1.Event) time.Time {
	var t time.Time
	for _, c := range []time.Time{e.FirstTimestamp.Time, e.LastTimestamp.Time, e.EventTime.Time} {
		if c.After(t) {
			t = c
		}
	}
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	if t.IsZero() {
		t = e.CreationTimestamp.Time
	}
	return t
}

// ClaimNode returns the node on which a claim holds an allocated device of cdplane's driver:
// the node its allocation's node selector names, else the device's pool (the kubelet plugin
// publishes one pool per node, named after it); "" when it holds none or is being deleted. It
// only tells the operator where claims landed; the controller checks claims in full
// (internal/controller/computedomain) before it counts a node as a member.
func ClaimNode(claim *resourcev1.ResourceClaim) string {
	alloc := claim.Status.Allocation
	if alloc == nil || claim.DeletionTimestamp != nil {
		return ""
	}
	for _, r := range alloc.Devices.Results {
		if r.Driver != cdv1beta1.DriverName {
			continue
		}
		if n := selectedNode(alloc.NodeSelector); n != "" {
			return n
		}
		return r.Pool
	}
	return ""
}

// selectedNode returns the one node a node selector names (one term, one field requirement
// metadata.name In [node], as the scheduler writes it), or "".
func selectedNode(ns *corev1.NodeSelector) string {
	if ns == nil || len(ns.NodeSelectorTerms) != 1 || len(ns.NodeSelectorTerms[0].MatchFields) != 1 {
		return ""
	}
	f := ns.NodeSelectorTerms[0].MatchFields[0]
	if f.Key != "metadata.name" || f.Operator != corev1.NodeSelectorOpIn || len(f.Values) != 1 {
		return ""
	}
	return f.Values[0]
}

func describe(id string) string {
	if id == "" {
		return "the legacy control plane"
	}
	return fmt.Sprintf("control plane %q", id)
}
