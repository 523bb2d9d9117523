package simkubelet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/component"
	"cdplane/internal/features"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/sim/nodehost"
	"cdplane/internal/sim/nvmlsim"
	"cdplane/internal/testutil"
)

const rack = 3

// recordingMapper is a REST mapper that records the kinds it was asked for.
type recordingMapper struct {
	meta.RESTMapper
	mu    sync.Mutex
	asked map[schema.GroupKind]bool
}

func (m *recordingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	m.mu.Lock()
	m.asked[gk] = true
	m.mu.Unlock()
	return m.RESTMapper.RESTMapping(gk, versions...)
}

func (m *recordingMapper) wasAsked(gk schema.GroupKind) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.asked[gk]
}

// startPlugin runs the compute-domain.nvidia.com kubelet plugin for node A in this process,
// with its host directories inside the node's directory where the simulated kubelet looks for
// them: the registry, the CDI directory, /dev and its state. Like an in-process instance of
// the simulated kubelet, it is given a REST mapper (returned) instead of discovering its own.
func startPlugin(t *testing.T, driverNS string) (string, *recordingMapper) {
	t.Helper()
	httpClient, err := rest.HTTPClientFor(testCluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	dm, err := apiutil.NewDynamicRESTMapper(testCluster.Config, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	mapper := &recordingMapper{RESTMapper: dm, asked: map[schema.GroupKind]bool{}}
	nodeDir := sim.NodeDir(nodeA)
	dataDir := filepath.Join(nodeDir, "var/lib/kubelet/plugins", cdv1beta1.DriverName)
	logger := testr.NewWithOptions(t, testr.Options{Verbosity: 1}).WithValues("node", nodeA)
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	if err := nodehost.WriteNode(nodeDir, nvmlsim.Rack(rack, nodeA)); err != nil {
		cancel()
		t.Fatal(err)
	}
	host, err := nodehost.InProcessPlugin(component.Invocation{LookupEnv: func(k string) (string, bool) { return nodeDir, k == nodehost.NodeDirEnv }})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	drv, err := kubeletplugin.Start(ctx, kubeletplugin.Options{
		NodeName: nodeA, DriverNamespace: driverNS, Config: testCluster.Config, Mapper: mapper,
		Discoverer: host.Discoverer, ReadHostFile: host.ReadHostFile,
		RegistrarDir:  filepath.Join(nodeDir, "var/lib/kubelet/plugins_registry"),
		PluginDataDir: dataDir, CDIRoot: filepath.Join(nodeDir, "var/run/cdi"),
		StateDir:    filepath.Join(dataDir, "state"),
		NumChannels: 4, Gates: features.NewGates(), ReadyWaitTimeout: time.Second,
	})
	if err != nil {
		cancel()
		t.Fatalf("starting the kubelet plugin: %v", err)
	}
	t.Cleanup(func() {
		drv.Stop()
		cancel()
	})
	return filepath.Join(dataDir, "state"), mapper
}

func ensureDaemonClass(t *testing.T) {
	t.Helper()
	dc := &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: cdv1beta1.DaemonDeviceClass},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: "device.driver == '" + cdv1beta1.DriverName + "' && device.attributes['" + cdv1beta1.DriverName + "'].type == 'daemon'",
		}}}},
	}
	if _, err := kube.ResourceV1().DeviceClasses().Create(ctxFor(t), dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func daemonClaimSpec(t *testing.T, domainID string) resourcev1.ResourceClaimSpec {
	t.Helper()
	params, err := json.Marshal(cdv1beta1.NewDaemonConfig(domainID))
	if err != nil {
		t.Fatal(err)
	}
	return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
		Requests: []resourcev1.DeviceRequest{{Name: "daemon", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: cdv1beta1.DaemonDeviceClass}}},
		Config: []resourcev1.DeviceClaimConfiguration{{
			Requests: []string{"daemon"},
			DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
				Driver: cdv1beta1.DriverName, Parameters: runtime.RawExtension{Raw: params},
			}},
		}},
	}}
}

// claimPod is a noop pod on node A whose container uses the claim made from template tmpl.
func claimPod(ns, name, tmpl string) *corev1.Pod {
	pod := podOn(ns, name, nodeA, "example.com/daemon:v1")
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "imex", ResourceClaimTemplateName: ptr.To(tmpl)}}
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "imex"}}
	return pod
}

// TestClaimPreparedAndUnprepared: a pod whose claim (from a template) kube-scheduler
// allocated on node A gets the CDI edits that the real kubelet plugin, registered through the
// node's plugin registry, prepared for it (env, mount and device node, remapped into the node
// directory); deleting the pod unprepares the claim before the pod goes. A claim the plugin
// cannot prepare leaves the pod waiting, with an event, and is retried.
func TestClaimPreparedAndUnprepared(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	ensureDaemonClass(t)
	ns := testCluster.Namespace(t, nil)
	pluginState, mapper := startPlugin(t, ns)
	// The plugin's watch cache of domains was built on the mapper it was given.
	if gk := cdv1beta1.GroupVersion.WithKind("ComputeDomain").GroupKind(); !mapper.wasAsked(gk) {
		t.Errorf("the plugin did not map %s through the REST mapper it was given", gk)
	}
	testutil.Eventually(t, 60*time.Second, "daemon device of "+nodeA+" published", func() (bool, error) {
		slices, err := kube.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeA})
		if err != nil {
			return false, err
		}
		for _, s := range slices.Items {
			for _, d := range s.Spec.Devices {
				if d.Name == kubeletplugin.DaemonDeviceName {
					return true, nil
				}
			}
		}
		return false, fmt.Errorf("%d slices, no daemon device", len(slices.Items))
	})

	cd := testutil.MakeComputeDomain("cd").Namespace(ns).NumNodes(1).Obj()
	if err := testCluster.Client.Create(ctx, cd); err != nil {
		t.Fatal(err)
	}
	for name, domain := range map[string]string{"daemon": string(cd.UID), "unknown": "00000000-0000-0000-0000-000000000001"} {
		tmpl := &resourcev1.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: daemonClaimSpec(t, domain)},
		}
		if _, err := kube.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// A claim of a domain the plugin does not know: the pod waits, the kubelet says why.
	bad := createPod(t, claimPod(ns, "bad", "unknown"))
	testutil.Eventually(t, 60*time.Second, "prepare failure reported", func() (bool, error) {
		events, err := kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(bad.UID)})
		if err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Reason == "FailedPrepareDynamicResources" && e.Source.Host == nodeA {
				return true, nil
			}
		}
		return false, fmt.Errorf("%d events, none about prepare", len(events.Items))
	})
	if p, err := kube.CoreV1().Pods(ns).Get(ctx, bad.Name, metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodPending {
		t.Errorf("pod with an unpreparable claim: phase %v (%v), want Pending", p.Status.Phase, err)
	}
	// Out of the way: node A has one daemon device.
	if err := kube.CoreV1().Pods(ns).Delete(ctx, bad.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodGone(t, ns, bad.Name, 30*time.Second)

	pod := createPod(t, claimPod(ns, "daemon", "daemon"))
	got := waitPod(t, ns, pod.Name, 90*time.Second, "pod with a claim running", running)
	if len(got.Status.ResourceClaimStatuses) != 1 || got.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("resource claim statuses %+v", got.Status.ResourceClaimStatuses)
	}
	claim, err := kube.ResourceV1().ResourceClaims(ns).Get(ctx, *got.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodeDir := sim.NodeDir(nodeA)
	record := waitLogs(t, ns, pod.Name, "main", func(s string) bool { return strings.Contains(s, "ARGS") })
	mgmt := fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", nodehost.IMEXMgmtMinor)
	want := map[string]string{
		"ENV COMPUTE_DOMAIN_UUID=":      string(cd.UID),
		"ENV COMPUTE_DOMAIN_NAME=":      cd.Name,
		"ENV COMPUTE_DOMAIN_NAMESPACE=": ns,
		"ENV CLIQUE_ID=":                nvmlsim.RackCliqueID(rack),
		"MOUNT /etc/nvidia-imex ":       filepath.Join(pluginState, "domains", string(cd.UID)),
		"DEVICE " + mgmt + " ":          filepath.Join(nodeDir, mgmt),
	}
	gotFields := map[string]string{}
	for prefix := range want {
		gotFields[prefix], _ = recordField(record, prefix)
	}
	if diff := cmp.Diff(want, gotFields); diff != "" {
		t.Errorf("CDI edits in the noop record (-want +got):\n%s\nrecord:\n%s", diff, record)
	}
	spec := filepath.Join(nodeDir, "var/run/cdi", kubeletplugin.CDISpecName(claim.UID))
	if _, err := os.Stat(spec); err != nil {
		t.Fatalf("claim's CDI spec: %v", err)
	}

	if err := kube.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodGone(t, ns, pod.Name, 30*time.Second)
	// Unprepared before the pod went: spec and checkpoint entry are gone.
	if _, err := os.Stat(spec); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CDI spec still there after the pod was removed: %v", err)
	}
	cp, err := kubeletplugin.ReadCheckpoint(filepath.Join(pluginState, kubeletplugin.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cp.Claims[types.UID(claim.UID)]; ok {
		t.Errorf("claim still in the plugin's checkpoint after the pod was removed: %+v", cp.Claims[claim.UID])
	}
}
