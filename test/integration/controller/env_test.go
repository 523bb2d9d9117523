package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller"
	"cdplane/internal/controller/computedomain"
	"cdplane/internal/daemon"
	"cdplane/internal/features"
	"cdplane/internal/imex"
	"cdplane/internal/sim/imexsim"
	"cdplane/internal/testutil"
	"cdplane/internal/testutil/cluster"
)

const testClique = "7f9c1b2e-0d7a-4c1f-9a55-3b6f2f0e8c11.1"

// env is one test's world: a namespace for its domains, a driver namespace, and a controller
// manager reconciling only this test's domains.
type env struct {
	*cluster.Env
	// t and c are Env's T and C under the names this suite's tests use.
	t        *testing.T
	c        client.Client
	ns       string
	driverNS string
	selector string
	stopMgr  func()
	opts     []func(*controller.Options)
	// cliques is the ComputeDomainCliques gate of the running manager, which daemons started
	// from now on get, as the DaemonSet template passes it.
	cliques bool

	// daemonEnv is added to every simulated IMEX's environment (its stand-ins).
	daemonEnv []string

	nodeDirsMu sync.Mutex
	nodeDirs   map[string]string // node name -> its "/" for the simulated IMEX (CDPLANE_SIM_NODE_DIR)
}

// nodeDir is the directory standing for a node's "/", shared by every daemon on the node: the
// simulated IMEX keeps the node's IMEX session lock and unsafe-termination marker there.
func (e *env) nodeDir(name string) (string, error) {
	e.nodeDirsMu.Lock()
	defer e.nodeDirsMu.Unlock()
	if dir, ok := e.nodeDirs[name]; ok {
		return dir, nil
	}
	dir, err := os.MkdirTemp("", "node-"+name) // not e.TempDir: called off the test's goroutine
	if err != nil {
		return "", err
	}
	e.t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if e.nodeDirs == nil {
		e.nodeDirs = map[string]string{}
	}
	e.nodeDirs[name] = dir
	return dir, nil
}

func newEnv(t *testing.T, cliques bool, opts ...func(*controller.Options)) *env {
	t.Helper()
	e := &env{Env: cluster.NewEnv(t, testCluster), t: t, c: testCluster.Client, opts: opts}
	e.ns, e.driverNS = e.Namespace(nil), e.Namespace(nil)
	e.selector = e.ns
	e.startManager(cliques)
	return e
}

// ctx is Env.Ctx, eventually Env.Eventually, under the names this suite's tests use.
func (e *env) ctx() context.Context { return e.Ctx() }

// startManager starts a controller manager with the ComputeDomainCliques gate set as given.
func (e *env) startManager(cliques bool) {
	e.t.Helper()
	e.startManagerWith(cliques, testCluster.Config)
}

// startManagerWith is startManager with the manager reaching the apiserver through cfg.
func (e *env) startManagerWith(cliques bool, cfg *rest.Config) {
	e.t.Helper()
	e.cliques = cliques
	gates := features.NewGates()
	if err := gates.SetFromMap(map[string]bool{string(features.ComputeDomainCliques): cliques}); err != nil {
		e.t.Fatal(err)
	}
	o := controller.Options{
		Options: computedomain.Options{
			DriverNamespace: e.driverNS, DaemonImage: "cdplane:test", Gates: gates,
			DaemonFeatureGates: features.DaemonGates(gates),
		},
		SkipNameValidation: true,
		DomainSelector:     labels.SelectorFromSet(labels.Set{"cdplane.test/env": e.selector}),
	}
	for _, opt := range e.opts {
		opt(&o)
	}
	mgr, err := controller.NewManager(context.Background(), cfg, o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.stopMgr = testutil.RunManager(e.t, mgr)
}

// createCD creates a domain of this test and returns it as created.
func (e *env) createCD(name string, numNodes int) *cdv1beta1.ComputeDomain {
	e.t.Helper()
	cd := testutil.MakeComputeDomain(name).Namespace(e.ns).NumNodes(numNodes).Label("cdplane.test/env", e.selector).Obj()
	if err := e.c.Create(e.ctx(), cd); err != nil {
		e.t.Fatal(err)
	}
	return cd
}

func (e *env) getCD(cd *cdv1beta1.ComputeDomain) *cdv1beta1.ComputeDomain {
	e.t.Helper()
	got := &cdv1beta1.ComputeDomain{}
	if err := e.c.Get(e.ctx(), client.ObjectKeyFromObject(cd), got); err != nil {
		e.t.Fatal(err)
	}
	return got
}

func (e *env) eventually(timeout time.Duration, what string, cond func() (bool, error)) {
	e.t.Helper()
	e.Eventually(timeout, what, cond)
}

// waitStatus waits until the domain's status.status is want.
func (e *env) waitStatus(cd *cdv1beta1.ComputeDomain, want string, timeout time.Duration) *cdv1beta1.ComputeDomain {
	e.t.Helper()
	var got *cdv1beta1.ComputeDomain
	e.eventually(timeout, "ComputeDomain "+cd.Name+" "+want, func() (bool, error) {
		got = &cdv1beta1.ComputeDomain{}
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(cd), got); err != nil {
			return false, err
		}
		return got.Status.Status == want, nil
	})
	return got
}

var nextIP atomic.Int32

// loopbackIP returns a fresh loopback address for a simulated pod.
func loopbackIP() string {
	n := nextIP.Add(1)
	return fmt.Sprintf("127.1.%d.%d", n/250, n%250+1)
}

// node is a simulated node with its daemon pod, daemon and kubelet loop.
type node struct {
	e      *env
	name   string
	cd     *cdv1beta1.ComputeDomain
	clique string
	// cliques is the daemon's ComputeDomainCliques gate (the manager's when it started).
	cliques bool
	// cliqueWait is the daemon's Config.CliqueWait (zero: the default).
	cliqueWait time.Duration
	pod        *corev1.Pod
	ip         string
	dir        string
	// fabricError is what the kubelet plugin would tell the daemon of a failed fabric.
	fabricError string
	// hostIMEXService is what the kubelet plugin would tell the daemon of an enabled host IMEX service.
	hostIMEXService string
	imex            imex.Interface
	cancel          context.CancelFunc
	done            chan error
	// writes records every request the daemon's own client sends that is not a read.
	writes *writeLog
	// starts holds back IMEX's (re)starts while set.
	starts *heldIMEX
	// metricsPort, when set, makes the daemon serve its metrics on its pod's IP at that port
	// ("0": any free one), labelled with metricsPlane; metricsAddr is where it listens.
	metricsPort, metricsPlane, metricsAddr string
	metricsEndpoint                        *daemon.MetricsEndpoint
}

// heldIMEX is an IMEX whose starts the test can hold back, so that the state between a crash
// and the restart lasts until the test has seen it.
type heldIMEX struct {
	imex.Interface
	held atomic.Bool
	// count counts the starts asked for.
	count atomic.Int32
}

func (h *heldIMEX) Start(ctx context.Context) (<-chan error, error) {
	h.count.Add(1)
	if h.held.Load() {
		return nil, errors.New("start held back by the test")
	}
	return h.Interface.Start(ctx)
}

// addNode creates a Node labelled for the domain, as the kubelet plugin labels it, and a channel
// claim of the domain allocated on it, as the scheduler leaves it: a node is a member only with
// both.
func (e *env) addNode(cd *cdv1beta1.ComputeDomain, name string) string {
	e.t.Helper()
	name = e.labelNode(cd, name)
	if err := e.allocateClaim(e.c, cd, name); err != nil {
		e.t.Fatal(err)
	}
	return name
}

// labelNode creates a Node labelled for the domain, and nothing else: what a node could do on
// its own.
func (e *env) labelNode(cd *cdv1beta1.ComputeDomain, name string) string {
	e.t.Helper()
	name = e.ns + "-" + name
	e.Create(testutil.MakeNode(name).Label(cdv1beta1.ComputeDomainLabel, string(cd.UID)).Obj())
	return name
}

// channelClaim is a claim made from the domain's workload template (labels, request, config), in
// namespace ns.
func channelClaim(cd *cdv1beta1.ComputeDomain, ns, node string) *resourcev1.ResourceClaim {
	raw, _ := json.Marshal(cdv1beta1.NewChannelConfig(string(cd.UID), cdv1beta1.AllocationModeSingle))
	return testutil.MakeResourceClaim("channel-"+node, ns).
		Label(cdv1beta1.ComputeDomainLabel, string(cd.UID)).Label("app.kubernetes.io/managed-by", "cdplane").
		Request("channel", cdv1beta1.ChannelDeviceClass).Config(cdv1beta1.DriverName, string(raw), "channel").Obj()
}

// allocate creates claim with the allocation the scheduler writes for a claim placed on node:
// channel-0 of the node's pool, the claim's config, a node selector naming the node.
func allocate(ctx context.Context, c client.Client, claim *resourcev1.ResourceClaim, node string) error {
	cfg := claim.Spec.Devices.Config[0].Opaque
	claim = (&testutil.ResourceClaimWrapper{ResourceClaim: *claim}).Device("channel", cdv1beta1.DriverName, node, "channel-0").
		AllocatedConfig(resourcev1.AllocationConfigSourceClaim, cfg.Driver, string(cfg.Parameters.Raw), "channel").NodeName(node).Obj()
	if err := cluster.CreateAllocated(ctx, c, claim); err != nil {
		return fmt.Errorf("allocating claim %s on %s: %w", claim.Name, node, err)
	}
	return nil
}

// allocateClaim creates a channel claim of the domain in its namespace and allocates it on node.
func (e *env) allocateClaim(c client.Client, cd *cdv1beta1.ComputeDomain, node string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return allocate(ctx, c, channelClaim(cd, cd.Namespace, node), node)
}

// daemonSetRef returns a controller reference to the domain's daemon DaemonSet, waiting for the
// controller to create it: daemon pods are the DaemonSet's.
func (e *env) daemonSetRef(cd *cdv1beta1.ComputeDomain) (metav1.OwnerReference, error) {
	ds := &appsv1.DaemonSet{}
	key := client.ObjectKey{Namespace: e.driverNS, Name: cdv1beta1.DaemonSetName(string(cd.UID))}
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return e.c.Get(ctx, key, ds) == nil, nil
	})
	if err != nil {
		return metav1.OwnerReference{}, fmt.Errorf("waiting for DaemonSet %s: %w", key, err)
	}
	return metav1.OwnerReference{
		APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}, nil
}

// unlabelNode removes the domain label from a node, as unprepare does.
func (e *env) unlabelNode(nodeName string) {
	e.t.Helper()
	e.SetLabel(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, cdv1beta1.ComputeDomainLabel, nil)
}

// startDaemon creates the daemon pod for the node (as the DaemonSet controller and scheduler
// would), starts the daemon on it and plays the kubelet: pod IP, then readiness from check.
func (e *env) startDaemon(cd *cdv1beta1.ComputeDomain, nodeName, clique string) *node {
	e.t.Helper()
	n, err := e.tryStartDaemon(cd, nodeName, clique)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// tryStartDaemon is startDaemon for other goroutines than the test's: it returns its error
// instead of failing the test (t.Fatal must not be called from another goroutine).
func (e *env) tryStartDaemon(cd *cdv1beta1.ComputeDomain, nodeName, clique string) (*node, error) {
	return e.tryStartDaemonWith(cd, nodeName, clique, nil)
}

// tryStartDaemonWith is tryStartDaemon with edit applied to the node before its daemon starts.
func (e *env) tryStartDaemonWith(cd *cdv1beta1.ComputeDomain, nodeName, clique string, edit func(*node)) (*node, error) {
	dir, err := os.MkdirTemp("", "daemon")
	if err != nil {
		return nil, err
	}
	e.t.Cleanup(func() { _ = os.RemoveAll(dir) })
	n := &node{e: e, name: nodeName, cd: cd, clique: clique, ip: loopbackIP(), dir: dir, cliques: e.cliques}
	if edit != nil {
		edit(n)
	}
	if err := n.createPod(); err != nil {
		return nil, fmt.Errorf("daemon pod on %s: %w", nodeName, err)
	}
	if err := n.start(); err != nil {
		return nil, fmt.Errorf("daemon on %s: %w", nodeName, err)
	}
	return n, nil
}

func (n *node) createPod() error {
	e := n.e
	owner, err := e.daemonSetRef(n.cd)
	if err != nil {
		return err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    cdv1beta1.DaemonSetName(string(n.cd.UID))[:30] + "-",
			Namespace:       e.driverNS,
			Labels:          map[string]string{cdv1beta1.ComputeDomainLabel: string(n.cd.UID), "app.kubernetes.io/managed-by": "cdplane"},
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Spec: corev1.PodSpec{NodeName: n.name, Containers: []corev1.Container{{Name: "daemon", Image: "cdplane:test"}}},
	}
	if err := e.c.Create(e.ctx(), pod); err != nil {
		return err
	}
	pod.Status.PodIP = n.ip
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	if err := e.c.Status().Update(e.ctx(), pod); err != nil {
		return err
	}
	n.pod = pod
	return nil
}

func (n *node) config() daemon.Config {
	c := daemon.Config{
		NodeName: n.name, PodIP: n.ip, PodName: n.pod.Name, PodNamespace: n.pod.Namespace, PodUID: string(n.pod.UID),
		CliqueID: n.clique, CDUID: string(n.cd.UID), CDName: n.cd.Name, CDNamespace: n.cd.Namespace,
		MaxNodes: 18, DNSNames: true, Cliques: n.cliques, CliqueWait: n.cliqueWait, ConfigDir: n.dir, HostsPath: filepath.Join(n.dir, "hosts"),
		FabricError: n.fabricError, HostIMEXService: n.hostIMEXService,
	}
	return c
}

// start runs the daemon with a client of its own, whose writes are recorded (n.writes) and
// whose requests carry the user agent cdplane-daemon/<node>.
func (n *node) start() error {
	e := n.e
	cfg := n.config()
	if err := os.WriteFile(cfg.HostsPath, []byte("127.0.0.1\tlocalhost\n"), 0o644); err != nil {
		return err
	}
	n.writes = &writeLog{}
	c, err := client.NewWithWatch(n.writes.wrap(testCluster.Config, "cdplane-daemon/"+n.name), client.Options{Scheme: testCluster.Scheme})
	if err != nil {
		return err
	}
	nodeDir, err := e.nodeDir(n.name)
	if err != nil {
		return err
	}
	// The node's stand-ins, as the simulated kubelet gives them to a daemon container: the
	// pod's address is its only local one (IMEX finds itself in the node list by it).
	n.starts = &heldIMEX{Interface: imexsim.New(imex.Options{ConfigPath: cfg.IMEXConfigPath(), HostsPath: cfg.HostsPath,
		Env: append([]string{imexsim.LocalAddrsEnv + "=" + n.ip, imexsim.NodeDirEnv + "=" + nodeDir}, e.daemonEnv...)})}
	n.imex = n.starts
	var m *daemon.Metrics
	if n.metricsPort != "" {
		// As the daemon's Main does with --metrics-bind-address=$(POD_IP):<port>.
		m = daemon.NewMetrics(cfg, n.metricsPlane, time.Now())
		if n.metricsEndpoint, err = daemon.ListenMetrics(net.JoinHostPort(n.ip, n.metricsPort), m.Registry()); err != nil {
			return err
		}
		n.metricsAddr = n.metricsEndpoint.Addr()
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan error, 1)
	go func() {
		n.done <- daemon.Serve(ctx, cfg, daemon.Deps{Client: c, IMEX: n.imex, Log: testr.New(e.t).WithValues("node", n.name), RestartBackoff: 100 * time.Millisecond, Metrics: m})
	}()
	go n.kubelet(ctx, cfg)
	e.t.Cleanup(n.stop)
	return nil
}

// kubelet sets the pod's Ready condition from the daemon's check, like a readiness probe.
func (n *node) kubelet(ctx context.Context, cfg daemon.Config) {
	ready := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		now := daemon.Check(ctx, cfg, n.imex) == nil
		if now == ready {
			continue
		}
		pod := &corev1.Pod{}
		if err := n.e.c.Get(ctx, client.ObjectKeyFromObject(n.pod), pod); err != nil {
			continue
		}
		status := corev1.ConditionFalse
		if now {
			status = corev1.ConditionTrue
		}
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
		if err := n.e.c.Status().Update(ctx, pod); err == nil {
			ready = now
		}
	}
}

// stop ends the daemon (SIGTERM) and waits for it.
func (n *node) stop() {
	if n.cancel == nil {
		return
	}
	n.cancel()
	if err := <-n.done; err != nil {
		n.e.t.Errorf("daemon on %s: %v", n.name, err)
	}
	n.cancel = nil
	if n.metricsEndpoint != nil {
		n.metricsEndpoint.Close()
		n.metricsEndpoint = nil
	}
}

// forceDeletePod deletes the daemon pod with grace period 0, as `kubectl delete --force` does.
func (n *node) forceDeletePod() {
	n.e.t.Helper()
	n.stop()
	if err := n.e.c.Delete(n.e.ctx(), n.pod, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		n.e.t.Fatal(err)
	}
}

// status asks the node's simulated IMEX for its state.
func (n *node) status() (imexsim.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return imexsim.Query(ctx, n.config().IMEXConfigPath())
}

// entry returns the node's entry in the domain's status.
func entryOf(cd *cdv1beta1.ComputeDomain, node string) (cdv1beta1.ComputeDomainNode, bool) {
	for _, n := range cd.Status.Nodes {
		if n.Name == node {
			return n, true
		}
	}
	return cdv1beta1.ComputeDomainNode{}, false
}
