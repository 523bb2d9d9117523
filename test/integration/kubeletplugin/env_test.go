package kubeletplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/component"
	"cdplane/internal/features"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/sim/nodehost"
	"cdplane/internal/sim/nvmlsim"
	"cdplane/internal/testutil"
	"cdplane/internal/testutil/cluster"
)

// readyWait is the plugin's per-call bound on waiting for the daemon in these tests.
const readyWait = 3 * time.Second

// env is one test's world: a workload namespace, a driver namespace, and one simulated node.
type env struct {
	*cluster.Env
	ns       string
	driverNS string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{Env: cluster.NewEnv(t, testCluster)}
	e.ns, e.driverNS = e.Namespace(nil), e.Namespace(nil)
	return e
}

var nodeSeq atomic.Int32

// node is a simulated node: its Node object, host directories and, once started, the plugin
// serving it and a kubelet-side connection to the plugin.
type node struct {
	e       *env
	name    string
	dir     string
	clique  string
	plane   string // the plugin's control-plane id: the node's plane label ("" legacy)
	sim     nvmlsim.Node
	drv     *kubeletplugin.Driver
	dra     drapbv1.DRAPluginClient
	conn    *grpc.ClientConn
	stopped bool
}

// nodeOption changes a node before it starts.
type nodeOption func(*corev1.Node, *nvmlsim.Node)

// schedulable gives the node what kube-scheduler needs: allocatable pods, CPU and memory, a
// Ready condition and a hostname label.
func schedulable() nodeOption {
	return func(n *corev1.Node, _ *nvmlsim.Node) {
		n.Labels[corev1.LabelHostname] = n.Name
		n.Status.Capacity = corev1.ResourceList{
			corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceCPU: resource.MustParse("8"),
			corev1.ResourceMemory: resource.MustParse("32Gi"),
		}
		n.Status.Allocatable = n.Status.Capacity
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	}
}

// noFabric makes the node's GPUs report no NVLink fabric.
func noFabric() nodeOption {
	return func(_ *corev1.Node, s *nvmlsim.Node) { s.Fabric = nvmlsim.Fabric{NoFabric: true} }
}

// inPlane assigns the node to control plane id (its plane label), so that its plugin runs
// for that plane and publishes id in every device's controlPlane attribute.
func inPlane(id string) nodeOption {
	return func(n *corev1.Node, _ *nvmlsim.Node) { n.Labels[cdv1beta1.ControlPlaneLabel] = id }
}

// addNode creates a Node in rack rack (its clique is the rack's) with its host directories.
func (e *env) addNode(rack int, opts ...nodeOption) *node {
	e.T.Helper()
	name := fmt.Sprintf("kp-%d-%s", nodeSeq.Add(1), e.ns[len(e.ns)-5:])
	sim := nvmlsim.Rack(rack, name)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	for _, o := range opts {
		o(n, &sim)
	}
	e.CreateNode(n)
	if n.Status.Allocatable != nil {
		// The apiserver taints new nodes not-ready; kube-controller-manager (not running here)
		// would lift the taint once the node reports Ready.
		n.Spec.Taints = nil
		if err := e.C.Update(e.Ctx(), n); err != nil {
			e.T.Fatal(err)
		}
	}
	dir := e.TempDir("kp") // Unix sockets below it
	if err := nodehost.WriteNode(dir, sim); err != nil {
		e.T.Fatal(err)
	}
	clique := ""
	if !sim.Fabric.NoFabric {
		clique = nvmlsim.RackCliqueID(rack)
	}
	return &node{e: e, name: name, dir: dir, clique: clique, plane: n.Labels[cdv1beta1.ControlPlaneLabel], sim: sim}
}

// host is what the simulated node's host gives a plugin: its /proc files and file device nodes.
func (n *node) host() kubeletplugin.Host {
	n.e.T.Helper()
	host, err := nodehost.Plugin(component.Invocation{LookupEnv: func(k string) (string, bool) {
		return n.dir, k == nodehost.NodeDirEnv
	}})
	if err != nil {
		n.e.T.Fatal(err)
	}
	return host
}

func (n *node) path(elem ...string) string { return filepath.Join(append([]string{n.dir}, elem...)...) }

// options are the plugin options of this node.
func (n *node) options(numChannels int) kubeletplugin.Options {
	gates := features.NewGates()
	host := n.host()
	return kubeletplugin.Options{
		NodeName: n.name, DriverNamespace: n.e.driverNS, Config: testCluster.Config,
		Discoverer: n.sim, ReadHostFile: host.ReadHostFile,
		RegistrarDir: n.path("registry"), PluginDataDir: n.path("plugin"), CDIRoot: n.path("cdi"),
		StateDir:    n.path("state"),
		NumChannels: numChannels, ControlPlaneID: n.plane, Gates: gates, CliqueNodeLabel: true,
		ReadyWaitTimeout: readyWait,
	}
}

// start runs the plugin in this process and registers with it as the kubelet does.
func (n *node) start(numChannels int) {
	n.e.T.Helper()
	n.startWith(numChannels, testr.NewWithOptions(n.e.T, testr.Options{Verbosity: 1}), nil)
}

// startWith is start with the plugin logging to logger, and its options changed by change
// (when not nil).
func (n *node) startWith(numChannels int, logger logr.Logger, change func(*kubeletplugin.Options)) {
	t := n.e.T
	t.Helper()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger.WithValues("node", n.name)))
	opts := n.options(numChannels)
	if change != nil {
		change(&opts)
	}
	drv, err := kubeletplugin.Start(ctx, opts)
	if err != nil {
		cancel()
		t.Fatalf("starting the plugin: %v", err)
	}
	n.drv = drv
	t.Cleanup(func() {
		n.stop()
		cancel()
	})
	n.connect()
}

func (n *node) stop() {
	if n.drv != nil && !n.stopped {
		n.stopped = true
		n.drv.Stop()
	}
	if n.conn != nil {
		_ = n.conn.Close()
		n.conn = nil
	}
}

// connect plays the kubelet's plugin watcher: GetInfo on the registration socket, check what it
// says, report success, then dial the DRA endpoint it names.
func (n *node) connect() {
	t := n.e.T
	t.Helper()
	reg := n.path("registry", cdv1beta1.DriverName+"-reg.sock")
	var info *registerapi.PluginInfo
	n.e.Eventually(30*time.Second, "registration socket answers", func() (bool, error) {
		conn, err := grpc.NewClient("unix://"+reg, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return false, err
		}
		defer func() { _ = conn.Close() }()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		rc := registerapi.NewRegistrationClient(conn)
		if info, err = rc.GetInfo(ctx, &registerapi.InfoRequest{}); err != nil {
			return false, err
		}
		_, err = rc.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true})
		return err == nil, err
	})
	if info.Type != registerapi.DRAPlugin || info.Name != cdv1beta1.DriverName {
		t.Fatalf("plugin registers as %s %q, want %s %q", info.Type, info.Name, registerapi.DRAPlugin, cdv1beta1.DriverName)
	}
	if !containsString(info.SupportedVersions, drapbv1.DRAPluginService) {
		t.Fatalf("plugin supports %v, want %s", info.SupportedVersions, drapbv1.DRAPluginService)
	}
	conn, err := grpc.NewClient("unix://"+info.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	n.conn, n.dra = conn, drapbv1.NewDRAPluginClient(conn)
}

// prepare calls NodePrepareResources for one claim and returns its answer and how long it took.
func (n *node) prepare(claim *resourcev1.ResourceClaim) (*drapbv1.NodePrepareResourceResponse, time.Duration) {
	n.e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	resp, err := n.dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{
		{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)},
	}})
	took := time.Since(start)
	if err != nil {
		n.e.T.Fatalf("NodePrepareResources: %v", err)
	}
	got, ok := resp.Claims[string(claim.UID)]
	if !ok {
		n.e.T.Fatalf("NodePrepareResources answered %v, nothing for claim %s", resp.Claims, claim.UID)
	}
	return got, took
}

// mustPrepare prepares a claim that must succeed.
func (n *node) mustPrepare(claim *resourcev1.ResourceClaim) *drapbv1.NodePrepareResourceResponse {
	n.e.T.Helper()
	got, _ := n.prepare(claim)
	if got.Error != "" {
		n.e.T.Fatalf("preparing claim %s: %s", claim.Name, got.Error)
	}
	return got
}

// unprepare calls NodeUnprepareResources for one claim and returns its error text.
func (n *node) unprepare(ns, name string, uid types.UID) string {
	n.e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := n.dra.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{
		{Namespace: ns, Name: name, Uid: string(uid)},
	}})
	if err != nil {
		n.e.T.Fatalf("NodeUnprepareResources: %v", err)
	}
	got, ok := resp.Claims[string(uid)]
	if !ok {
		n.e.T.Fatalf("NodeUnprepareResources answered nothing for claim %s", uid)
	}
	return got.Error
}

// cdiSpec reads a claim's CDI spec; ok is false when there is none.
func (n *node) cdiSpec(uid types.UID) (*cdispec.Spec, bool) {
	n.e.T.Helper()
	data, err := os.ReadFile(n.path("cdi", kubeletplugin.CDISpecName(uid)))
	if os.IsNotExist(err) {
		return nil, false
	}
	if err != nil {
		n.e.T.Fatal(err)
	}
	spec := &cdispec.Spec{}
	if err := json.Unmarshal(data, spec); err != nil {
		n.e.T.Fatalf("CDI spec of %s: %v", uid, err)
	}
	return spec, true
}

// checkpoint reads the node's checkpoint file.
func (n *node) checkpoint() kubeletplugin.Checkpoint {
	n.e.T.Helper()
	cp, err := kubeletplugin.ReadCheckpoint(n.path("state", kubeletplugin.CheckpointFile))
	if err != nil {
		n.e.T.Fatal(err)
	}
	return cp
}

// label returns the node's ComputeDomain label.
func (n *node) label() string {
	n.e.T.Helper()
	return n.labels()[cdv1beta1.ComputeDomainLabel]
}

// labels returns the node's labels.
func (n *node) labels() map[string]string {
	n.e.T.Helper()
	got := &corev1.Node{}
	if err := n.e.C.Get(n.e.Ctx(), client.ObjectKey{Name: n.name}, got); err != nil {
		n.e.T.Fatal(err)
	}
	return got.Labels
}

// setLabel sets (or with "" removes) the node's ComputeDomain label, as another plugin run or an
// administrator would.
func (n *node) setLabel(value string) {
	n.e.T.Helper()
	var v *string
	if value != "" {
		v = &value
	}
	n.e.SetLabel(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}, cdv1beta1.ComputeDomainLabel, v)
}

// createCD creates a ComputeDomain in namespace ns.
func (e *env) createCD(ns, name string) *cdv1beta1.ComputeDomain {
	e.T.Helper()
	cd := testutil.MakeComputeDomain(name).Namespace(ns).NumNodes(1).Obj()
	if err := createAdmitted(e.Ctx(), e.C, cd); err != nil {
		e.T.Fatal(err)
	}
	return cd
}

// createAdmitted creates obj, retrying while the apiserver answers 503: a MutatingAdmissionPolicy
// on ComputeDomains refuses them so until it has loaded the CRD's schema (up to a few seconds
// after the policy or the CRD was installed, which another test may just have done).
func createAdmitted(ctx context.Context, c client.Client, obj client.Object) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = c.Create(ctx, obj)
		if apierrors.IsServiceUnavailable(last) {
			return false, nil
		}
		return true, last
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w (last error: %w)", err, last)
	}
	return err
}

// annotateMembership sets the domain's membership annotation, as cdplane's controller does.
func (e *env) annotateMembership(cd *cdv1beta1.ComputeDomain, place string) {
	e.T.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, cdv1beta1.MembershipAnnotation, place)
	if err := e.C.Patch(e.Ctx(), cd, client.RawPatch(types.MergePatchType, patch)); err != nil {
		e.T.Fatal(err)
	}
}

// setStatusNode writes the node's entry into the domain's status.nodes, as the controller does
// for domains kept without cliques and for fabric-less nodes.
func (e *env) setStatusNode(cd *cdv1beta1.ComputeDomain, n *node, index int, status string) {
	e.T.Helper()
	got := &cdv1beta1.ComputeDomain{}
	if err := e.C.Get(e.Ctx(), client.ObjectKeyFromObject(cd), got); err != nil {
		e.T.Fatal(err)
	}
	got.Status.Nodes = []cdv1beta1.ComputeDomainNode{{Name: n.name, IPAddress: "127.0.0.1", CliqueID: n.clique, Index: index, Status: status}}
	got.Status.Status = status
	if err := e.C.Status().Update(e.Ctx(), got); err != nil {
		e.T.Fatal(err)
	}
}

// setClique writes the domain's clique with one entry for the node, as the controller does.
func (e *env) setClique(cd *cdv1beta1.ComputeDomain, n *node, status string) {
	e.T.Helper()
	name := string(cd.UID) + "." + n.clique
	want := testutil.MakeClique(name, e.driverNS).Daemon(n.name, "127.0.0.1", n.clique, 0, status).Obj()
	// Labelled as the controller labels it: the plugin watches the cliques of its own clique id.
	want.Labels = map[string]string{cdv1beta1.ComputeDomainLabel: string(cd.UID), cdv1beta1.CliqueIDLabel: n.clique}
	got := &cdv1beta1.ComputeDomainClique{}
	err := e.C.Get(e.Ctx(), client.ObjectKey{Namespace: e.driverNS, Name: name}, got)
	if err != nil {
		if err := e.C.Create(e.Ctx(), want); err != nil {
			e.T.Fatal(err)
		}
		return
	}
	got.Daemons = want.Daemons
	if err := e.C.Update(e.Ctx(), got); err != nil {
		e.T.Fatal(err)
	}
}

// rawJSON marshals v for an opaque config.
func rawJSON(t *testing.T, v any) runtime.RawExtension {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: data}
}

// claimSpec is a claim spec with one request of the given class and one opaque config.
func claimSpec(request, class string, params runtime.RawExtension) resourcev1.ResourceClaimSpec {
	return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
		Requests: []resourcev1.DeviceRequest{{Name: request, Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class}}},
		Config: []resourcev1.DeviceClaimConfiguration{{
			Requests: []string{request},
			DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
				Driver: cdv1beta1.DriverName, Parameters: params,
			}},
		}},
	}}
}

// allocatedClaim creates a claim for one device of this node and writes its allocation as the
// scheduler would: the device, and the claim's opaque config. allocParams, when set, is the
// config written into the allocation instead of the spec's (the driver must not trust
// admission).
func (e *env) allocatedClaim(ns, name string, n *node, device string, params runtime.RawExtension, allocParams *runtime.RawExtension) *resourcev1.ResourceClaim {
	e.T.Helper()
	class, request := cdv1beta1.ChannelDeviceClass, "channel"
	if device == kubeletplugin.DaemonDeviceName {
		class, request = cdv1beta1.DaemonDeviceClass, "daemon"
	}
	alloc := params
	if allocParams != nil {
		alloc = *allocParams
	}
	claim := testutil.MakeResourceClaim(name, ns).Request(request, class).Config(cdv1beta1.DriverName, string(params.Raw), request).
		Device(request, cdv1beta1.DriverName, n.name, device).
		AllocatedConfig(resourcev1.AllocationConfigSourceClaim, cdv1beta1.DriverName, string(alloc.Raw), request).Obj()
	if err := cluster.CreateAllocated(e.Ctx(), e.C, claim); err != nil {
		e.T.Fatalf("creating allocated claim %s: %v", name, err)
	}
	e.T.Cleanup(func() { _ = e.C.Delete(context.Background(), claim) })
	return claim
}

// channelClaim creates a channel claim of domain cd, allocated on channel-0 of the node.
func (e *env) channelClaim(ns, name string, n *node, cd *cdv1beta1.ComputeDomain, mode string) *resourcev1.ResourceClaim {
	e.T.Helper()
	return e.channelClaimOn(ns, name, n, cd, mode, 0)
}

// channelClaimOn is channelClaim allocated on channel-<id> of the node: claims prepared side by
// side on one node hold distinct devices, as the scheduler allocates them (the plugin refuses a
// device it holds prepared for another claim).
func (e *env) channelClaimOn(ns, name string, n *node, cd *cdv1beta1.ComputeDomain, mode string, id int) *resourcev1.ResourceClaim {
	e.T.Helper()
	return e.allocatedClaim(ns, name, n, kubeletplugin.ChannelDeviceName(id), rawJSON(e.T, cdv1beta1.NewChannelConfig(string(cd.UID), mode)), nil)
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// deviceNodePaths lists the container paths of a CDI device's device nodes.
func deviceNodePaths(d cdispec.Device) []string {
	var out []string
	for _, n := range d.ContainerEdits.DeviceNodes {
		out = append(out, n.Path)
	}
	return out
}
