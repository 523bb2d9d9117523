package status

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/kubectl/pkg/util/podutils"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/lifecycle"
	"cdplane/internal/plane"
)

// Names and labels the plane chart (deployments/helm/cdplane) gives its objects.
const (
	// controllerLegacyName is the controller Deployment's legacy name, and the default name of
	// its leader-election Lease (internal/controller: plane.Name(id, "cdplane-controller")).
	controllerLegacyName = "cdplane-controller"
	// kubeletPluginLegacyName is the kubelet plugin DaemonSet's legacy name, and its pods'
	// app.kubernetes.io/name.
	kubeletPluginLegacyName = "cdplane-kubelet-plugin"
	nameLabel               = "app.kubernetes.io/name"
	instanceLabel           = "app.kubernetes.io/instance"
	partOfLabel             = "app.kubernetes.io/part-of"
	versionLabel            = "app.kubernetes.io/version"
	partOfValue             = "cdplane"
)

// How Plane.Nodes and Plane.Namespaces were counted.
const (
	CountedByLabel         = "label"
	CountedByKubeletPlugin = "kubeletPlugin"
	CountedByDomains       = "domains"
)

// PlanesInput is everything BuildPlanes needs, as read from the cluster.
type PlanesInput struct {
	// Controllers are the planes' controller Deployments (see PlaneOf).
	Controllers []appsv1.Deployment
	Nodes       []metav1.PartialObjectMetadata
	Namespaces  []metav1.PartialObjectMetadata
	Domains     []cdv1beta1.ComputeDomain
	// PluginPods are each installed plane's kubelet-plugin pods, by plane id.
	PluginPods map[string][]corev1.Pod
	// Leases are each installed plane's leader-election Lease, by plane id (absent: none).
	Leases map[string]*coordinationv1.Lease
	Now    time.Time
}

// PlaneOf returns the control-plane id of a plane's controller Deployment, as the plane chart
// renders it: labelled app.kubernetes.io/name=cdplane-controller and part-of cdplane, with the
// plane label for a plane with an id, named and placed as its Helm release is
// (lifecycle.PlaneRelease). ok is false for any other Deployment.
func PlaneOf(d *appsv1.Deployment) (id string, ok bool) {
	if d.Labels[nameLabel] != controllerLegacyName || d.Labels[partOfLabel] != partOfValue {
		return "", false
	}
	id = d.Labels[cdv1beta1.ControlPlaneLabel]
	if plane.ValidateID(id) != nil {
		return "", false
	}
	_, ns := lifecycle.PlaneRelease(id)
	return id, d.Namespace == ns && d.Name == plane.Name(id, controllerLegacyName)
}

// controllerArg returns the value of the controller container's flag --name ("--name=v" or
// "--name v").
func controllerArg(d *appsv1.Deployment, name string) (string, bool) {
	for _, c := range d.Spec.Template.Spec.Containers {
		args := append(slices.Clone(c.Command), c.Args...)
		for i, a := range args {
			switch {
			case strings.HasPrefix(a, "--"+name+"="):
				return strings.TrimPrefix(a, "--"+name+"="), true
			case a == "--"+name && i+1 < len(args):
				return args[i+1], true
			}
		}
	}
	return "", false
}

// LeaseOf returns the name of the controller's leader-election Lease (--leader-election-id, by
// default plane.Name(id, "cdplane-controller")) and whether it elects a leader at all.
func LeaseOf(id string, d *appsv1.Deployment) (name string, election bool) {
	name = plane.Name(id, controllerLegacyName)
	if v, ok := controllerArg(d, "leader-election-id"); ok && v != "" {
		name = v
	}
	v, ok := controllerArg(d, "leader-elect")
	return name, !ok || v != "false"
}

// MaxNodesPerClique returns the controller's --max-nodes-per-imex-domain (the default when the
// flag is absent or unreadable).
func MaxNodesPerClique(d *appsv1.Deployment) int {
	if d != nil {
		if v, ok := controllerArg(d, "max-nodes-per-imex-domain"); ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				return n
			}
		}
	}
	return cdv1beta1.DefaultMaxNodesPerIMEXDomain
}

// VersionOf returns the controller image's tag, or the app.kubernetes.io/version label when the
// image has none (a digest, or no tag).
func VersionOf(d *appsv1.Deployment) string {
	if cs := d.Spec.Template.Spec.Containers; len(cs) > 0 {
		ref, _, _ := strings.Cut(cs[0].Image, "@")
		if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
			return ref[i+1:]
		}
	}
	return d.Labels[versionLabel]
}

// BuildPlanes counts, for every plane installed or referred to by a label, its nodes,
// namespaces and domains, and reads its leader.
func BuildPlanes(in PlanesInput) Planes {
	controllers := map[string]*appsv1.Deployment{}
	for i := range in.Controllers {
		if id, ok := PlaneOf(&in.Controllers[i]); ok {
			controllers[id] = &in.Controllers[i]
		}
	}
	ids := sets.New[string]()
	for id := range controllers {
		ids.Insert(id)
	}
	addLabel := func(l map[string]string) {
		if v, ok := l[cdv1beta1.ControlPlaneLabel]; ok && v != "" && plane.ValidateID(v) == nil {
			ids.Insert(v)
		}
	}
	for _, n := range in.Nodes {
		addLabel(n.Labels)
	}
	for _, ns := range in.Namespaces {
		addLabel(ns.Labels)
	}
	for _, cd := range in.Domains {
		if _, ok := cd.Labels[cdv1beta1.ControlPlaneLabel]; !ok {
			ids.Insert("") // the legacy plane has domains
		}
		addLabel(cd.Labels)
	}

	out := Planes{ObservedAt: in.Now.UTC(), Planes: []Plane{}}
	for _, id := range sets.List(ids) {
		out.Planes = append(out.Planes, buildPlane(id, controllers[id], in))
	}
	slices.SortFunc(out.Planes, func(a, b Plane) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

func buildPlane(id string, dep *appsv1.Deployment, in PlanesInput) Plane {
	_, ns := lifecycle.PlaneRelease(id)
	p := Plane{ID: id, Legacy: id == "", Installed: dep != nil, DriverNamespace: ns,
		NodesCountedBy: CountedByLabel, NamespacesCountedBy: CountedByLabel}
	if dep != nil {
		p.Version = VersionOf(dep)
		p.Controller = Replicas{Desired: 1, Ready: dep.Status.ReadyReplicas}
		if dep.Spec.Replicas != nil {
			p.Controller.Desired = *dep.Spec.Replicas
		}
		lease, election := LeaseOf(id, dep)
		p.Leader = leaderOf(lease, election, in.Leases[id], in.Now)
	}

	// Nodes, and those with a Ready kubelet-plugin pod.
	pluginReady := map[string]bool{}
	for i := range in.PluginPods[id] {
		pod := &in.PluginPods[id][i]
		if pod.Spec.NodeName != "" {
			pluginReady[pod.Spec.NodeName] = pluginReady[pod.Spec.NodeName] || podutils.IsPodReady(pod)
		}
	}
	var nodes []string
	if p.Legacy {
		p.NodesCountedBy = CountedByKubeletPlugin
		for n := range pluginReady {
			nodes = append(nodes, n)
		}
	} else {
		for _, n := range in.Nodes {
			if plane.Owns(id, n.Labels) {
				nodes = append(nodes, n.Name)
			}
		}
	}
	p.Nodes = len(nodes)
	for _, n := range nodes {
		if pluginReady[n] {
			p.NodesPluginReady++
		}
	}

	// Namespaces.
	labelled := sets.New[string]()
	for _, n := range in.Namespaces {
		if _, ok := n.Labels[cdv1beta1.ControlPlaneLabel]; ok {
			labelled.Insert(n.Name)
		}
		if !p.Legacy && plane.Owns(id, n.Labels) && n.Name != ns {
			p.Namespaces++
		}
	}
	legacyNamespaces := sets.New[string]()
	for _, cd := range in.Domains {
		if !plane.Owns(id, cd.Labels) {
			continue
		}
		if cd.Status.Status == cdv1beta1.StatusReady {
			p.Domains.Ready++
		} else {
			p.Domains.NotReady++
		}
		if p.Legacy && !labelled.Has(cd.Namespace) {
			legacyNamespaces.Insert(cd.Namespace)
		}
	}
	if p.Legacy {
		p.NamespacesCountedBy = CountedByDomains
		p.Namespaces = legacyNamespaces.Len()
	}
	return p
}

// leaderOf reads a leader-election Lease (nil: none).
func leaderOf(name string, election bool, lease *coordinationv1.Lease, now time.Time) *Leader {
	l := &Leader{Lease: name, Election: election}
	if lease == nil || lease.Spec.HolderIdentity == nil {
		return l
	}
	l.Holder = *lease.Spec.HolderIdentity
	if t := lease.Spec.AcquireTime; t != nil {
		at := t.UTC()
		l.AcquireTime = &at
		l.AgeSeconds = int64(now.Sub(at) / time.Second)
	}
	if r, d := lease.Spec.RenewTime, lease.Spec.LeaseDurationSeconds; r != nil && d != nil {
		l.Expired = now.After(r.Add(time.Duration(*d) * time.Second))
	}
	return l
}
