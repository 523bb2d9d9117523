// Package bench measures daemon registration: N daemons joining one ComputeDomain against a real
// apiserver, with this design's single-writer protocol and with reproductions of the original's
// protocols, each compared to the floor of the writes no protocol can avoid.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/scheme"
)

const (
	daemonSA      = "cdplane-daemon"
	benchRoleName = "cdplane-bench-daemon"
	benchNodeRole = "cdplane-bench-node"
	benchEnvLabel = "cdplane.bench/run"
	daemonQPS     = 5
	daemonBurst   = 10
	kubeletQPS    = 50
	kubeletBurst  = 100
	setupQPS      = 2000
	setupBurst    = 4000
	setupWorkers  = 32
)

// writeCounter counts the mutating requests going through a transport that the apiserver
// accepted (requests it refused, 409s and 429s among them, are counted from its own metrics).
type writeCounter struct{ n atomic.Int64 }

func (w *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		switch r.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			if err == nil && resp.StatusCode < 400 {
				w.n.Add(1)
			}
		}
		return resp, err
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// setupClient is the fast administrator client that creates and removes the benchmark's objects.
func setupClient(cfg *rest.Config) (client.Client, error) {
	admin := rest.CopyConfig(cfg)
	admin.QPS, admin.Burst = setupQPS, setupBurst
	return client.New(admin, client.Options{Scheme: newScheme()})
}

// identity returns a config acting as user/groups through impersonation, with its own rate
// limiter (qps, burst) and its writes counted in counter.
func identity(base *rest.Config, user string, groups []string, qps float32, burst int, counter *writeCounter) *rest.Config {
	cfg := rest.CopyConfig(base)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:authenticated")}
	cfg.QPS, cfg.Burst = qps, burst
	if counter != nil {
		cfg.Wrap(counter.wrap)
	}
	return cfg
}

// onTransport returns cfg reaching its apiserver through rt (a sharedTransport of the same
// apiserver) instead of a transport of client-go's, its impersonation, rate limiter and
// wrappers kept.
func onTransport(cfg *rest.Config, rt http.RoundTripper) *rest.Config {
	cfg.TLSClientConfig = rest.TLSClientConfig{}
	cfg.Transport = rt
	return cfg
}

// golang.org/x/net/http2.Transport is deprecated in favour of net/http's, whose pooling is the
// very behaviour replaced here (TestInstancesShareConnections counts the connections of each;
// see docs/scale.md, "Design choices and what was measured").
var (
	sharedMu         sync.Mutex
	sharedTransports = map[string]*http2.Transport{} //nolint:staticcheck // see above
)

// sharedTransport returns the one HTTP/2 transport through which the instances of the
// benchmark (thousands of identities in this process) reach base's apiserver. client-go shares
// its transport among them too, but through net/http, which, while every connection of the pool
// carries as many streams as the apiserver allows (the instances' watches stay open), dials and
// handshakes a new connection for each request that comes, keeps one and closes the others: in
// a large burst TLS handshakes took a large share of this process's CPU and of kube-apiserver's,
// in every mode. golang.org/x/net/http2's own pool dials one connection at a time and shares it
// among the requests waiting (TestInstancesShareConnections). Real daemons each run in their own
// pod with one connection; this is the benchmark's cost, not theirs.
func sharedTransport(base *rest.Config) (*http2.Transport, error) { //nolint:staticcheck // see sharedTransports
	key := clusterKey(base)
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if t, ok := sharedTransports[key]; ok {
		return t, nil
	}
	tlsCfg, err := rest.TLSConfigFor(base)
	if err != nil {
		return nil, err
	}
	if tlsCfg == nil {
		return nil, fmt.Errorf("the benchmark's apiserver %s is not reached over TLS", base.Host)
	}
	// The health checks client-go gives its own HTTP/2 connections.
	t := &http2.Transport{TLSClientConfig: tlsCfg, ReadIdleTimeout: 30 * time.Second, PingTimeout: 15 * time.Second} //nolint:staticcheck // see sharedTransports
	sharedTransports[key] = t
	return t, nil
}

// closeSharedTransport closes the idle connections of base's shared transport and forgets it:
// the apiserver it reached is stopped (a fresh one per mode).
func closeSharedTransport(base *rest.Config) {
	key := clusterKey(base)
	sharedMu.Lock()
	t := sharedTransports[key]
	delete(sharedTransports, key)
	sharedMu.Unlock()
	if t != nil {
		t.CloseIdleConnections() //nolint:staticcheck // see sharedTransports
	}
}

func daemonUser(ns string) (string, []string) {
	return "system:serviceaccount:" + ns + ":" + daemonSA, []string{"system:serviceaccounts", "system:serviceaccounts:" + ns}
}

func nodeUser(node string) (string, []string) {
	return "system:node:" + node, []string{"system:nodes"}
}

// The controller's identity: a service account, classified by the FlowSchema the plane chart
// installs for its controller (priority level workload-high, matching precedence 1000), so that
// the controller is measured under the same flow control as in a cluster, not exempt as an
// administrator would be.
const (
	controllerNamespace = "cdplane-bench"
	controllerSA        = "cdplane-controller"
	controllerFlowLevel = "workload-high"
)

func controllerUser() (string, []string) {
	return "system:serviceaccount:" + controllerNamespace + ":" + controllerSA,
		[]string{"system:serviceaccounts", "system:serviceaccounts:" + controllerNamespace}
}

// ensureRBAC grants the daemon service accounts and the node identities what the protocols
// need, and the controller's service account what it writes (cluster-admin: RBAC is not what is
// measured), with the chart's FlowSchema for it.
func ensureRBAC(ctx context.Context, c client.Client) error {
	fs := &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: "cdplane-bench-controller"},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: controllerFlowLevel},
			MatchingPrecedence:         1000,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindServiceAccount,
					ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Namespace: controllerNamespace, Name: controllerSA}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"},
					Namespaces: []string{"*"}, ClusterScope: true}},
			}},
		},
	}
	if err := client.IgnoreAlreadyExists(c.Create(ctx, fs)); err != nil {
		return fmt.Errorf("creating FlowSchema %s: %w", fs.Name, err)
	}
	roles := []*rbacv1.ClusterRole{
		{
			ObjectMeta: metav1.ObjectMeta{Name: benchRoleName},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "patch"}},
				{APIGroups: []string{cdv1beta1.GroupName}, Resources: []string{"computedomains", "computedomaincliques"}, Verbs: []string{"get", "list", "watch"}},
				// The peer protocols write membership from the daemons; cdplane's daemons never do.
				{APIGroups: []string{cdv1beta1.GroupName}, Resources: []string{"computedomains/status"}, Verbs: []string{"get", "update"}},
				{APIGroups: []string{cdv1beta1.GroupName}, Resources: []string{"computedomaincliques"}, Verbs: []string{"create", "update"}},
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: benchNodeRole},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "pods/status"}, Verbs: []string{"get", "update", "patch"}}},
		},
	}
	bindings := []*rbacv1.ClusterRoleBinding{
		{
			ObjectMeta: metav1.ObjectMeta{Name: benchRoleName},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: benchRoleName},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts"}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: benchNodeRole},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: benchNodeRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:nodes"}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "cdplane-bench-controller"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: controllerNamespace, Name: controllerSA}},
		},
	}
	for _, r := range roles {
		if err := client.IgnoreAlreadyExists(c.Create(ctx, r)); err != nil {
			return fmt.Errorf("creating ClusterRole %s: %w", r.Name, err)
		}
	}
	for _, b := range bindings {
		if err := client.IgnoreAlreadyExists(c.Create(ctx, b)); err != nil {
			return fmt.Errorf("creating ClusterRoleBinding %s: %w", b.Name, err)
		}
	}
	return nil
}

// parallel runs fn(i) for i in [0,n) on workers goroutines and returns the first error.
func parallel(n, workers int, fn func(i int) error) error {
	var (
		wg    sync.WaitGroup
		next  atomic.Int64
		first atomic.Pointer[error]
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || first.Load() != nil {
					return
				}
				if err := fn(i); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return *p
	}
	return nil
}

// world is one mode's namespaces, domain, nodes and pods.
type world struct {
	run      string
	driverNS string
	cdNS     string
	cd       *cdv1beta1.ComputeDomain
	nodes    []string
	pods     []*corev1.Pod
	cliques  []string
}

// newWorld creates the namespaces, the domain, its daemon DaemonSet, N labelled nodes, N channel
// claims allocated one per node and N daemon pods owned by the DaemonSet and bound to the nodes
// (what the controller, the scheduler and the DaemonSet controller would have made; the
// controller counts a node only with all three) with a fast admin client.
func newWorld(ctx context.Context, c client.Client, run string, n, cliqueSize int) (*world, error) {
	w := &world{run: run, driverNS: run + "-driver", cdNS: run + "-ws"}
	for _, ns := range []string{w.driverNS, w.cdNS} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	w.cd = &cdv1beta1.ComputeDomain{
		ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: w.cdNS, Labels: map[string]string{benchEnvLabel: run}},
		Spec: cdv1beta1.ComputeDomainSpec{NumNodes: n, Channel: &cdv1beta1.ComputeDomainChannelSpec{
			ResourceClaimTemplate: cdv1beta1.ComputeDomainResourceClaimTemplate{Name: "bench-channel"},
		}},
	}
	if err := c.Create(ctx, w.cd); err != nil {
		return nil, fmt.Errorf("creating the ComputeDomain: %w", err)
	}
	uid := string(w.cd.UID)
	owned := map[string]string{cdv1beta1.ComputeDomainLabel: uid, "app.kubernetes.io/managed-by": "cdplane"}
	ds := daemonSet(w.driverNS, uid, owned)
	if err := c.Create(ctx, ds); err != nil {
		return nil, fmt.Errorf("creating the daemon DaemonSet: %w", err)
	}
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: ptr.To(true)}
	w.nodes = make([]string, n)
	w.pods = make([]*corev1.Pod, n)
	for i := range n {
		w.nodes[i] = fmt.Sprintf("%s-node-%05d", run, i)
		if i%cliqueSize == 0 {
			w.cliques = append(w.cliques, fmt.Sprintf("00000000-0000-4000-8000-%012d.%d", i/cliqueSize, 1))
		}
	}
	err := parallel(n, setupWorkers, func(i int) error {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: w.nodes[i], Labels: map[string]string{cdv1beta1.ComputeDomainLabel: uid, benchEnvLabel: run},
		}}
		if err := c.Create(ctx, node); err != nil {
			return fmt.Errorf("creating node %s: %w", node.Name, err)
		}
		if err := allocatedClaim(ctx, c, w.cdNS, uid, owned, node.Name); err != nil {
			return err
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("daemon-%05d", i), Namespace: w.driverNS,
				Labels: owned, OwnerReferences: []metav1.OwnerReference{owner},
			},
			Spec: corev1.PodSpec{NodeName: w.nodes[i], ServiceAccountName: daemonSA,
				Containers: []corev1.Container{{Name: "daemon", Image: "cdplane:bench"}}},
		}
		if err := c.Create(ctx, pod); err != nil {
			return fmt.Errorf("creating pod %s: %w", pod.Name, err)
		}
		w.pods[i] = pod
		return nil
	})
	return w, err
}

// daemonSet is the domain's daemon DaemonSet as the controller names and labels it (the
// controller adopts it: it carries the labels the controller puts on what it creates). The
// benchmark's cluster runs no DaemonSet controller, so it never makes pods of its own.
func daemonSet(ns, uid string, labels map[string]string) *appsv1.DaemonSet {
	sel := map[string]string{cdv1beta1.ComputeDomainLabel: uid}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: cdv1beta1.DaemonSetName(uid), Namespace: ns, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{NodeSelector: sel, ServiceAccountName: daemonSA,
					Containers: []corev1.Container{{Name: "daemon", Image: "cdplane:bench"}}},
			},
		},
	}
}

// allocatedClaim creates a channel claim of the domain in its namespace, labelled as claims made
// from the domain's template are, and writes the allocation the scheduler would write for it on
// node: channel-0 of the node's pool, the domain's channel config, a node selector naming node.
func allocatedClaim(ctx context.Context, c client.Client, ns, uid string, labels map[string]string, node string) error {
	raw, err := json.Marshal(cdv1beta1.NewChannelConfig(uid, cdv1beta1.AllocationModeSingle))
	if err != nil {
		return err
	}
	config := resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
		Driver: cdv1beta1.DriverName, Parameters: runtime.RawExtension{Raw: raw},
	}}
	claim := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "channel-" + node, Namespace: ns, Labels: labels},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "channel", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: cdv1beta1.ChannelDeviceClass}}},
			Config:   []resourcev1.DeviceClaimConfiguration{{Requests: []string{"channel"}, DeviceConfiguration: config}},
		}},
	}
	if err := c.Create(ctx, claim); err != nil {
		return fmt.Errorf("creating the channel claim of node %s: %w", node, err)
	}
	claim.Status.Allocation = &resourcev1.AllocationResult{
		Devices: resourcev1.DeviceAllocationResult{
			Results: []resourcev1.DeviceRequestAllocationResult{{Request: "channel", Driver: cdv1beta1.DriverName, Pool: node, Device: "channel-0"}},
			Config: []resourcev1.DeviceAllocationConfiguration{{
				Source: resourcev1.AllocationConfigSourceClaim, Requests: []string{"channel"}, DeviceConfiguration: config,
			}},
		},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
		}}}}},
	}
	if err := c.Status().Update(ctx, claim); err != nil {
		return fmt.Errorf("allocating the channel claim of node %s: %w", node, err)
	}
	return nil
}

func (w *world) clique(i, cliqueSize int) string { return w.cliques[i/cliqueSize] }

func (w *world) ip(i int) string {
	return fmt.Sprintf("127.%d.%d.%d", 10+i/65025, (i/255)%255, i%255+1)
}

// cleanup deletes what the world created.
func (w *world) cleanup(ctx context.Context, c client.Client) {
	_ = c.DeleteAllOf(ctx, &corev1.Node{}, client.MatchingLabels{benchEnvLabel: w.run})
	for _, ns := range []string{w.driverNS, w.cdNS} {
		_ = c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
}

// newScheme returns the one scheme every client of the benchmark shares: building one per client
// cost thousands of instances a large share of the process's CPU (found with --profile).
var newScheme = sync.OnceValue(scheme.New)
