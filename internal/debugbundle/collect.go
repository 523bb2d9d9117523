// Package debugbundle collects what support needs to diagnose cdplane on a cluster into one
// gzipped tar (`cdplane debug bundle`): the status of every plane and domain, the domains'
// objects and events, the cdplane pods' logs, and what only the nodes know (each kubelet
// plugin's checkpoint and CDI specs, each IMEX daemon's view of its domain). Every file is
// redacted as it is written (Redact); Secrets are never read. A step that fails is recorded in
// the bundle's errors.txt and manifest.json and the bundle goes on; only an unreachable cluster
// or an unwritable archive stops it.
package debugbundle

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/lifecycle"
	"cdplane/internal/status"
)

// Defaults of Options.
const (
	DefaultLogLines    = 2000
	DefaultParallelism = 8
	// execTimeout bounds one command run in a pod.
	execTimeout = 30 * time.Second
)

// Labels the plane chart gives the kubelet plugin's pods (deployments/helm/cdplane).
const (
	nameLabel         = "app.kubernetes.io/name"
	kubeletPluginName = "cdplane-kubelet-plugin"
)

// Options say what to collect and with which clients.
type Options struct {
	// Client reads objects (the CLI's client, with its retries).
	Client client.Client
	// Clientset reads logs and runs commands in pods.
	Clientset kubernetes.Interface
	// Config is the REST config for pods/exec (without wrapping round-trippers: the stream
	// upgrades the connection).
	Config *rest.Config
	// LogLines is how many lines of each container's log to keep (current and previous).
	LogLines int64
	// Parallelism bounds the logs read and commands run at once.
	Parallelism int
	// Progress receives a line before each long step; nil: none.
	Progress io.Writer
	// Now is when the bundle was started.
	Now time.Time
}

// collector holds one run's state.
type collector struct {
	o Options
	a *Archive
	// execRT runs pods/exec; nil when the config gives none (every exec is then recorded as failed).
	execRT http.RoundTripper
}

// Collect reads the cluster into a. It returns an error only when the cluster cannot be reached
// or the archive cannot be written; every other failure is recorded in the archive.
func Collect(ctx context.Context, o Options, a *Archive) error {
	if o.LogLines <= 0 {
		o.LogLines = DefaultLogLines
	}
	if o.Parallelism <= 0 {
		o.Parallelism = DefaultParallelism
	}
	c := &collector{o: o, a: a}
	rt, err := execTransport(o.Config)
	if err != nil {
		a.Fail("pods/exec", err)
	}
	c.execRT = rt
	c.progress("Reading the control planes")
	if err := c.cluster(); err != nil {
		return err
	}
	planes, err := status.GatherPlanes(ctx, o.Client, o.Now)
	if err != nil {
		a.Fail("status/planes.json", err)
	} else if err := a.AddJSON("status/planes.json", "cdplane status -o json: every control plane", planes); err != nil {
		return err
	}

	cds := &cdv1beta1.ComputeDomainList{}
	if err := c.list(ctx, "computedomains.json", "every ComputeDomain", cds); err != nil {
		return err
	}
	if err := c.list(ctx, "computedomaincliques.json", "every ComputeDomainClique", &cdv1beta1.ComputeDomainCliqueList{}); err != nil {
		return err
	}
	if err := c.nodes(ctx); err != nil {
		return err
	}
	if err := c.resourceSlices(ctx); err != nil {
		return err
	}

	driverNamespaces := map[string]bool{}
	for _, p := range planes.Planes {
		if p.Installed {
			driverNamespaces[p.DriverNamespace] = true
		}
	}
	c.progress(fmt.Sprintf("Reading %d ComputeDomains, their claims and events", len(cds.Items)))
	for i := range cds.Items {
		ns, err := c.domain(ctx, &cds.Items[i])
		if err != nil {
			return err
		}
		driverNamespaces[ns] = true
	}
	var pods []corev1.Pod
	for _, ns := range sortedKeys(driverNamespaces) {
		p, err := c.driverNamespace(ctx, ns)
		if err != nil {
			return err
		}
		pods = append(pods, p...)
	}
	return c.fromPods(ctx, pods)
}

func (c *collector) progress(msg string) {
	if c.o.Progress != nil {
		fmt.Fprintln(c.o.Progress, msg)
	}
}

// cluster checks that the apiserver answers, and records its version.
func (c *collector) cluster() error {
	v, err := c.o.Clientset.Discovery().ServerVersion()
	if err != nil {
		return fmt.Errorf("the cluster at %s cannot be reached: %w", c.o.Config.Host, err)
	}
	return c.a.AddJSON("cluster/version.json", "the apiserver's version", v)
}

// list lists every object of a kind into name; a kind the cluster does not serve, or that
// cannot be read, is recorded.
func (c *collector) list(ctx context.Context, name, description string, list client.ObjectList, opts ...client.ListOption) error {
	if err := c.o.Client.List(ctx, list, opts...); err != nil {
		c.a.Fail(name, err)
		return nil
	}
	return c.a.AddJSON(name, description, withoutManagedFields(list))
}

// withoutManagedFields drops the list's items' managed fields (server-side apply's records:
// often the larger part of an object, and nothing support reads).
func withoutManagedFields(list client.ObjectList) client.ObjectList {
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		if a, err := meta.Accessor(o); err == nil {
			a.SetManagedFields(nil)
		}
		return nil
	})
	return list
}

// nodeSummary is what the bundle keeps of a node: the labels the kubelet plugin, the daemons
// and the planes set, its taints and conditions; not its images or addresses' secrets.
type nodeSummary struct {
	Name       string                 `json:"name"`
	Labels     map[string]string      `json:"labels"`
	Taints     []corev1.Taint         `json:"taints,omitempty"`
	Conditions []corev1.NodeCondition `json:"conditions,omitempty"`
	NodeInfo   corev1.NodeSystemInfo  `json:"nodeInfo"`
}

func (c *collector) nodes(ctx context.Context) error {
	nodes := &corev1.NodeList{}
	if err := c.o.Client.List(ctx, nodes); err != nil {
		c.a.Fail("nodes.json", err)
		return nil
	}
	out := make([]nodeSummary, 0, len(nodes.Items))
	for _, n := range nodes.Items {
		out = append(out, nodeSummary{Name: n.Name, Labels: n.Labels, Taints: n.Spec.Taints, Conditions: n.Status.Conditions, NodeInfo: n.Status.NodeInfo})
	}
	return c.a.AddJSON("nodes.json", "every node's labels, taints, conditions and versions", out)
}

// resourceSlices keeps the ResourceSlices of cdplane's driver: the devices each node publishes.
func (c *collector) resourceSlices(ctx context.Context) error {
	list := &resourcev1.ResourceSliceList{}
	if err := c.o.Client.List(ctx, list); err != nil {
		c.a.Fail("resourceslices.json", err)
		return nil
	}
	list.Items = slices.DeleteFunc(list.Items, func(s resourcev1.ResourceSlice) bool { return s.Spec.Driver != cdv1beta1.DriverName })
	return c.a.AddJSON("resourceslices.json", "the ResourceSlices of "+cdv1beta1.DriverName, withoutManagedFields(list))
}

// domain writes one domain's status, claims, the pods using them and the events about all of
// them, and returns its plane's driver namespace.
func (c *collector) domain(ctx context.Context, cd *cdv1beta1.ComputeDomain) (string, error) {
	dir := "domains/" + cd.Namespace + "/" + cd.Name + "/"
	d, err := status.GatherDomain(ctx, c.o.Client, cd.Namespace, cd.Name, c.o.Now)
	if err != nil {
		c.a.Fail(dir+"status.json", err)
	} else if err := c.a.AddJSON(dir+"status.json", "cdplane status -n "+cd.Namespace+" "+cd.Name+" -o json", d); err != nil {
		return "", err
	}
	driverNS := d.DriverNamespace
	if driverNS == "" {
		_, driverNS = lifecycle.PlaneRelease(cd.Labels[cdv1beta1.ControlPlaneLabel])
	}

	uids := map[types.UID]bool{cd.UID: true}
	claims := &resourcev1.ResourceClaimList{}
	if err := c.o.Client.List(ctx, claims, client.InNamespace(cd.Namespace), client.MatchingLabels{cdv1beta1.ComputeDomainLabel: string(cd.UID)}); err != nil {
		c.a.Fail(dir+"resourceclaims.json", err)
	} else if err := c.a.AddJSON(dir+"resourceclaims.json", "the domain's channel claims", withoutManagedFields(claims)); err != nil {
		return "", err
	}
	pods := &corev1.PodList{}
	for _, claim := range claims.Items {
		uids[claim.UID] = true
		for _, r := range claim.Status.ReservedFor {
			if r.Resource != "pods" || uids[r.UID] {
				continue
			}
			uids[r.UID] = true
			p := &corev1.Pod{}
			switch err := c.o.Client.Get(ctx, client.ObjectKey{Namespace: cd.Namespace, Name: r.Name}, p); {
			case apierrors.IsNotFound(err):
			case err != nil:
				c.a.Fail(dir+"pods.json", fmt.Errorf("reading pod %s/%s: %w", cd.Namespace, r.Name, err))
			default:
				pods.Items = append(pods.Items, *p)
			}
		}
	}
	if err := c.a.AddJSON(dir+"pods.json", "the pods the domain's claims are reserved for", withoutManagedFields(pods)); err != nil {
		return "", err
	}
	events := &corev1.EventList{}
	if err := c.o.Client.List(ctx, events, client.InNamespace(cd.Namespace)); err != nil {
		c.a.Fail(dir+"events.json", err)
		return driverNS, nil
	}
	events.Items = slices.DeleteFunc(events.Items, func(e corev1.Event) bool { return !uids[e.InvolvedObject.UID] })
	return driverNS, c.a.AddJSON(dir+"events.json", "the events about the domain, its claims and their pods", events)
}

// driverNamespace writes a plane's driver namespace: its pods, workloads and events (never its
// Secrets), and returns its pods.
func (c *collector) driverNamespace(ctx context.Context, ns string) ([]corev1.Pod, error) {
	dir := "namespaces/" + ns + "/"
	pods := &corev1.PodList{}
	switch err := c.o.Client.List(ctx, pods, client.InNamespace(ns)); {
	case err != nil:
		c.a.Fail(dir+"pods.json", err)
	default:
		if err := c.a.AddJSON(dir+"pods.json", "the pods of driver namespace "+ns+": controller, kubelet plugins, daemons", withoutManagedFields(pods)); err != nil {
			return nil, err
		}
	}
	for _, l := range []struct {
		name string
		list client.ObjectList
	}{
		{"daemonsets.json", &appsv1.DaemonSetList{}},
		{"deployments.json", &appsv1.DeploymentList{}},
		{"resourceclaims.json", &resourcev1.ResourceClaimList{}},
		{"events.json", &corev1.EventList{}},
	} {
		if err := c.list(ctx, dir+l.name, "the "+l.name[:len(l.name)-len(".json")]+" of driver namespace "+ns, l.list, client.InNamespace(ns)); err != nil {
			return nil, err
		}
	}
	return pods.Items, nil
}

// fromPods reads every pod's logs and runs the node commands, Parallelism at a time.
func (c *collector) fromPods(ctx context.Context, pods []corev1.Pod) error {
	var jobs []func() error
	plugins, daemons := 0, 0
	for i := range pods {
		p := &pods[i]
		for _, ct := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
			jobs = append(jobs, func() error { return c.logs(ctx, p, ct.Name, false) })
			if restarted(p, ct.Name) {
				jobs = append(jobs, func() error { return c.logs(ctx, p, ct.Name, true) })
			}
		}
		switch {
		case p.Labels[nameLabel] == kubeletPluginName:
			plugins++
			jobs = append(jobs, func() error { return c.pluginFiles(ctx, p) })
		case isDaemon(p):
			daemons++
			jobs = append(jobs, func() error { return c.imexNodes(ctx, p) })
		}
	}
	c.progress(fmt.Sprintf("Reading the logs of %d pods, the files of %d kubelet plugins and the IMEX view of %d daemons", len(pods), plugins, daemons))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, c.o.Parallelism)
	for _, job := range jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := job(); err != nil {
				mu.Lock()
				first = cmpOr(first, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// restarted reports whether a container has a previous instance whose log may be kept.
func restarted(p *corev1.Pod, container string) bool {
	for _, s := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		if s.Name == container {
			return s.RestartCount > 0 || s.LastTerminationState.Terminated != nil
		}
	}
	return false
}

// isDaemon reports whether a pod is an IMEX daemon of a domain: labelled with the domain and
// controlled by the domain's DaemonSet.
func isDaemon(p *corev1.Pod) bool {
	uid := p.Labels[cdv1beta1.ComputeDomainLabel]
	ref := metav1.GetControllerOf(p)
	return uid != "" && ref != nil && ref.Kind == "DaemonSet" && ref.Name == cdv1beta1.DaemonSetName(uid)
}

// logs writes the last LogLines lines of one container's log (its previous instance's when
// previous).
func (c *collector) logs(ctx context.Context, p *corev1.Pod, container string, previous bool) error {
	name := "logs/" + p.Namespace + "/" + p.Name + "/" + container + ".log"
	what := "the log of container " + container
	if previous {
		name = "logs/" + p.Namespace + "/" + p.Name + "/" + container + ".previous.log"
		what = "the log of the previous instance of container " + container
	}
	lines := c.o.LogLines
	req := c.o.Clientset.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container, Previous: previous, TailLines: &lines, Timestamps: true})
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	data, err := req.DoRaw(ctx)
	if err != nil {
		if msg := statusMessage(data); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		c.a.Fail(name, fmt.Errorf("reading %s of pod %s/%s: %w", what, p.Namespace, p.Name, err))
		return nil
	}
	return c.a.Add(name, what+" of pod "+p.Namespace+"/"+p.Name+" (last "+fmt.Sprint(lines)+" lines)", data)
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
