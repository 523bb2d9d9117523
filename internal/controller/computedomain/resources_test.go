package computedomain

import (
	"time"

	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/component-base/featuregate"
	"k8s.io/utils/ptr"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/daemonenv"
	"cdplane/internal/features"
	"cdplane/internal/testutil"
)

const (
	testUID      = "0b7e3f4a-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
	testDriverNS = "cdplane-driver"
	managedBy    = "app.kubernetes.io/managed-by"
)

func testDomain() *cdv1beta1.ComputeDomain {
	return testutil.MakeComputeDomain("cd").Namespace("ns").UID(testUID).ClaimTemplate("cd-channel").Obj()
}

// ownedBy are the labels of everything created for the test domain, with the plane label for a
// plane with an id.
func ownedBy(planeID string) map[string]string {
	l := map[string]string{cdv1beta1.ComputeDomainLabel: testUID, managedBy: "cdplane"}
	if planeID != "" {
		l[cdv1beta1.ControlPlaneLabel] = planeID
	}
	return l
}

// planeSelector is the CEL selector of a plane's claim templates.
func planeSelector(planeID string) []resourcev1.DeviceSelector {
	return []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
		Expression: `device.attributes["compute-domain.nvidia.com"].controlPlane == "` + planeID + `"`,
	}}}
}

func opaque(request, raw string) []resourcev1.DeviceClaimConfiguration {
	return []resourcev1.DeviceClaimConfiguration{{
		Requests: []string{request},
		DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
			Driver: "compute-domain.nvidia.com", Parameters: runtime.RawExtension{Raw: []byte(raw)},
		}},
	}}
}

func TestWorkloadClaimTemplate(t *testing.T) {
	want := func(planeID, mode string, selectors []resourcev1.DeviceSelector) *resourcev1.ResourceClaimTemplate {
		return &resourcev1.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{
				Name: "cd-channel", Namespace: "ns", Labels: ownedBy(planeID),
				OwnerReferences: []metav1.OwnerReference{testutil.ControllerRef("resource.nvidia.com/v1beta1", "ComputeDomain", "cd", testUID)},
			},
			Spec: resourcev1.ResourceClaimTemplateSpec{
				// Claims made from it carry the domain's labels: the controller's cache holds them.
				ObjectMeta: metav1.ObjectMeta{Labels: ownedBy(planeID)},
				Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
					Requests: []resourcev1.DeviceRequest{{Name: "channel", Exactly: &resourcev1.ExactDeviceRequest{
						DeviceClassName: "compute-domain-default-channel.nvidia.com", Selectors: selectors,
					}}},
					Config: opaque("channel", `{"kind":"ComputeDomainChannelConfig","apiVersion":"resource.nvidia.com/v1beta1","domainID":"`+testUID+`","allocationMode":"`+mode+`"}`),
				}},
			},
		}
	}
	cases := map[string]struct {
		planeID string
		mode    string
		want    *resourcev1.ResourceClaimTemplate
	}{
		"legacy plane: no plane label, selects controlPlane \"\"; mode defaults to Single": {want: want("", "Single", planeSelector(""))},
		"mode All":                        {mode: "All", want: want("", "All", planeSelector(""))},
		"plane: plane label and selector": {planeID: "alpha", want: want("alpha", "Single", planeSelector("alpha"))},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := New(nil, nil, Options{DriverNamespace: testDriverNS, ControlPlaneID: tc.planeID})
			cd := testDomain()
			cd.Spec.Channel.AllocationMode = tc.mode
			if diff := cmp.Diff(tc.want, r.workloadClaimTemplate(cd)); diff != "" {
				t.Errorf("workload claim template (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDaemonClaimTemplate(t *testing.T) {
	want := func(planeID string, selectors []resourcev1.DeviceSelector) *resourcev1.ResourceClaimTemplate {
		return &resourcev1.ResourceClaimTemplate{
			// In the driver namespace, so no owner reference to the domain: it goes by label.
			ObjectMeta: metav1.ObjectMeta{Name: "computedomain-daemon-" + testUID, Namespace: testDriverNS, Labels: ownedBy(planeID)},
			Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
				Requests: []resourcev1.DeviceRequest{{Name: "daemon", Exactly: &resourcev1.ExactDeviceRequest{
					DeviceClassName: "compute-domain-daemon.nvidia.com", Selectors: selectors,
				}}},
				Config: opaque("daemon", `{"kind":"ComputeDomainDaemonConfig","apiVersion":"resource.nvidia.com/v1beta1","domainID":"`+testUID+`"}`),
			}}},
		}
	}
	cases := map[string]struct {
		planeID string
		want    *resourcev1.ResourceClaimTemplate
	}{
		"legacy plane": {want: want("", planeSelector(""))},
		"plane":        {planeID: "alpha", want: want("alpha", planeSelector("alpha"))},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := New(nil, nil, Options{DriverNamespace: testDriverNS, ControlPlaneID: tc.planeID})
			got := r.daemonClaimTemplate(testDomain())
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("daemon claim template (-want +got):\n%s", diff)
			}
			if got.Name != cdv1beta1.DaemonSetName(testUID) {
				t.Errorf("daemon claim template %s, want the DaemonSet's name %s", got.Name, cdv1beta1.DaemonSetName(testUID))
			}
		})
	}
}

// daemonWant is what varies in the daemon DaemonSet between the cases.
type daemonWant struct {
	planeID, image, binary, serviceAccount, priorityClass, maxNodes, verbosity, gates string
	// strategy is the update strategy; empty: OnDelete.
	strategy *appsv1.DaemonSetUpdateStrategy
	// args and ports are the daemon container's (the metrics endpoint's); none when empty.
	args  []string
	ports []corev1.ContainerPort
}

func (w daemonWant) daemonSet() *appsv1.DaemonSet {
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	env := []corev1.EnvVar{
		field(daemonenv.NodeName, "spec.nodeName"),
		field(daemonenv.PodIP, "status.podIP"),
		field(daemonenv.PodName, "metadata.name"),
		field(daemonenv.PodNamespace, "metadata.namespace"),
		field(daemonenv.PodUID, "metadata.uid"),
		{Name: daemonenv.DomainUID, Value: testUID},
		{Name: daemonenv.DomainName, Value: "cd"},
		{Name: daemonenv.DomainNamespace, Value: "ns"},
		{Name: daemonenv.MaxNodesPerIMEXDomain, Value: w.maxNodes},
		{Name: daemonenv.LogVerbosity, Value: w.verbosity},
		{Name: daemonenv.HostsFile, Value: "/etc/hosts"},
	}
	if w.gates != "" {
		env = append(env, corev1.EnvVar{Name: daemonenv.FeatureGates, Value: w.gates})
	}
	probe := func(period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{w.binary, "check"}}},
			PeriodSeconds: period, TimeoutSeconds: 10, FailureThreshold: failures,
		}
	}
	ds := testutil.MakeDaemonSet("computedomain-daemon-"+testUID, testDriverNS).
		Selector(cdv1beta1.ComputeDomainLabel, testUID).
		NodeSelector(cdv1beta1.ComputeDomainLabel, testUID).
		Toleration(corev1.Toleration{Operator: corev1.TolerationOpExists}).
		ServiceAccount(w.serviceAccount).PriorityClass(w.priorityClass).TerminationGracePeriod(30).
		Containers(corev1.Container{
			Name: "compute-domain-daemon", Image: w.image, Command: []string{w.binary, "run"}, Args: w.args, Ports: w.ports, Env: env,
			StartupProbe: probe(2, 600), ReadinessProbe: probe(10, 3), LivenessProbe: probe(60, 20),
		}).
		ClaimFromTemplate("compute-domain-daemon", "computedomain-daemon-"+testUID)
	for k, v := range ownedBy(w.planeID) {
		ds.Label(k, v).PodLabel(k, v)
	}
	out := ds.Obj()
	out.Spec.Template.Spec.DNSConfig = &corev1.PodDNSConfig{Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("1")}}}
	out.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	if w.strategy != nil {
		out.Spec.UpdateStrategy = *w.strategy
	}
	return out
}

func TestDaemonSet(t *testing.T) {
	cases := map[string]struct {
		opts Options
		want daemonWant
	}{
		"legacy plane, defaults": {
			opts: Options{DaemonImage: "cdplane:v1"},
			want: daemonWant{image: "cdplane:v1", binary: "cdplane-daemon", maxNodes: "18", verbosity: "0"},
		},
		"plane: plane label on the DaemonSet and its pods, not in the selectors": {
			opts: Options{DaemonImage: "cdplane:v1", ControlPlaneID: "alpha"},
			want: daemonWant{planeID: "alpha", image: "cdplane:v1", binary: "cdplane-daemon", maxNodes: "18", verbosity: "0"},
		},
		"settings": {
			opts: Options{
				DaemonImage: "registry/cdplane:v2", DaemonBinary: "/bin/cdplane-daemon", DaemonServiceAccount: "cdplane-daemon",
				DaemonPriorityClass: "system-node-critical", DaemonLogVerbosity: 4, DaemonFeatureGates: "IMEXDaemonsWithDNSNames=true",
				MaxNodesPerIMEXDomain: 4,
			},
			want: daemonWant{
				image: "registry/cdplane:v2", binary: "/bin/cdplane-daemon", serviceAccount: "cdplane-daemon",
				priorityClass: "system-node-critical", maxNodes: "4", verbosity: "4", gates: "IMEXDaemonsWithDNSNames=true",
			},
		},
		"legacy plane, daemon metrics: on the pod's IP, no plane argument": {
			opts: Options{DaemonImage: "cdplane:v1", DaemonMetricsPort: 8082},
			want: daemonWant{
				image: "cdplane:v1", binary: "cdplane-daemon", maxNodes: "18", verbosity: "0",
				args:  []string{"--metrics-bind-address=$(POD_IP):8082"},
				ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 8082}},
			},
		},
		"plane, daemon metrics: labelled with the plane": {
			opts: Options{DaemonImage: "cdplane:v1", ControlPlaneID: "alpha", DaemonMetricsPort: 9100},
			want: daemonWant{
				planeID: "alpha", image: "cdplane:v1", binary: "cdplane-daemon", maxNodes: "18", verbosity: "0",
				args:  []string{"--metrics-bind-address=$(POD_IP):9100", "--control-plane-id=alpha"},
				ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9100}},
			},
		},
		"RollingUpdate: one node of the domain at a time, no surge (one IMEX per node)": {
			opts: Options{DaemonImage: "cdplane:v1", DaemonUpdateStrategy: appsv1.RollingUpdateDaemonSetStrategyType},
			want: daemonWant{
				image: "cdplane:v1", binary: "cdplane-daemon", maxNodes: "18", verbosity: "0",
				strategy: &appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: &appsv1.RollingUpdateDaemonSet{
					MaxUnavailable: ptr.To(intstr.FromInt32(1)), MaxSurge: ptr.To(intstr.FromInt32(0)),
				}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tc.opts.DriverNamespace = testDriverNS
			got := New(nil, nil, tc.opts).daemonSet(testDomain())
			if diff := cmp.Diff(tc.want.daemonSet(), got, cmpopts.IgnoreTypes(metav1.TypeMeta{})); diff != "" {
				t.Errorf("DaemonSet (-want +got):\n%s", diff)
			}
		})
	}
}

// The daemon reads what the DaemonSet sets, through the same contract: resolving the
// container's environment as the kubelet does gives the daemon its identity and settings.
func TestDaemonSetEnvironmentIsWhatTheDaemonReads(t *testing.T) {
	r := New(nil, nil, Options{DriverNamespace: testDriverNS, DaemonLogVerbosity: 2, MaxNodesPerIMEXDomain: 6, DaemonFeatureGates: "CrashOnNVLinkFabricErrors=true"})
	pod := map[string]string{"spec.nodeName": "n1", "status.podIP": "127.0.0.5", "metadata.name": "p", "metadata.namespace": testDriverNS, "metadata.uid": "pu"}
	env := map[string]string{}
	for _, e := range r.daemonSet(testDomain()).Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom != nil {
			env[e.Name] = pod[e.ValueFrom.FieldRef.FieldPath]
			continue
		}
		env[e.Name] = e.Value
	}
	// The kubelet plugin adds the claim's part when it prepares the daemon claim.
	env[daemonenv.CliqueID] = "uuid.1"
	got, err := daemonenv.Read(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	want := daemonenv.Env{
		NodeName: "n1", PodIP: "127.0.0.5", PodName: "p", PodNamespace: testDriverNS, PodUID: "pu",
		DomainUID: testUID, DomainName: "cd", DomainNamespace: "ns", CliqueID: "uuid.1", CliqueIDSet: true,
		MaxNodesPerIMEXDomain: 6, LogVerbosity: 2, FeatureGates: "CrashOnNVLinkFabricErrors=true",
		IMEXConfigDir: cdv1beta1.DaemonIMEXConfigDir, HostsFile: cdv1beta1.DaemonHostsFile,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the daemon's environment (-want +got):\n%s", diff)
	}
}

// Flipping ComputeDomainCliques must not roll the daemons: nothing in the DaemonSet depends on it.
func TestDaemonSetDoesNotDependOnTheCliquesGate(t *testing.T) {
	ds := func(on bool) *appsv1.DaemonSet {
		gates := features.NewGatesForTest(t, map[featuregate.Feature]bool{features.ComputeDomainCliques: on})
		return New(nil, nil, Options{DriverNamespace: testDriverNS, DaemonImage: "cdplane:v1", Gates: gates}).daemonSet(testDomain())
	}
	if diff := cmp.Diff(ds(false), ds(true)); diff != "" {
		t.Errorf("DaemonSet with the gate off (-) and on (+):\n%s", diff)
	}
}

func TestCreatedFor(t *testing.T) {
	other := map[string]string{cdv1beta1.ComputeDomainLabel: "other", managedBy: "cdplane"}
	cases := map[string]struct {
		planeID string
		labels  map[string]string
		// want: created by this plane's controller for the test domain; byController: by a
		// controller, for any domain, on any plane (CreatedByController).
		want, byController bool
	}{
		"ours":                      {labels: ownedBy(""), want: true, byController: true},
		"ours, plane":               {planeID: "alpha", labels: ownedBy("alpha"), want: true, byController: true},
		"another domain":            {labels: other, byController: true},
		"not managed by cdplane":    {labels: map[string]string{cdv1beta1.ComputeDomainLabel: testUID}},
		"unlabelled":                {},
		"another plane's":           {planeID: "alpha", labels: ownedBy("beta"), byController: true},
		"a plane's, legacy reading": {labels: ownedBy("alpha"), byController: true},
		"legacy, plane reading":     {planeID: "alpha", labels: ownedBy(""), byController: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := New(nil, nil, Options{DriverNamespace: testDriverNS, ControlPlaneID: tc.planeID})
			if got := r.createdFor(tc.labels, testUID); got != tc.want {
				t.Errorf("createdFor(%v) = %v, want %v", tc.labels, got, tc.want)
			}
			if got := CreatedByController(tc.labels); got != tc.byController {
				t.Errorf("CreatedByController(%v) = %v, want %v", tc.labels, got, tc.byController)
			}
		})
	}
}

// The objects a domain gets all carry its labels; the test's helpers agree with the product's.
func TestOwnedLabels(t *testing.T) {
	for _, planeID := range []string{"", "alpha"} {
		r := New(nil, nil, Options{DriverNamespace: testDriverNS, ControlPlaneID: planeID})
		if diff := cmp.Diff(ownedBy(planeID), r.ownedLabels(testDomain())); diff != "" {
			t.Errorf("plane %q: labels (-want +got):\n%s", planeID, diff)
		}
		if !r.createdFor(r.ownedLabels(testDomain()), testUID) {
			t.Errorf("plane %q: the labels it stamps are not recognised as its own", planeID)
		}
	}
}

// A running IMEX that lost a peer recovers inside its container; a liveness restart ends its
// memory exports on every other node. Liveness must wait as long as NVIDIA's driver does (20
// minutes) and never be stricter than the start-up window.
func TestDaemonLivenessLetsIMEXRecover(t *testing.T) {
	c := New(nil, nil, Options{DriverNamespace: testDriverNS, DaemonImage: "cdplane:v1"}).daemonSet(testDomain()).Spec.Template.Spec.Containers[0]
	window := func(p *corev1.Probe) time.Duration {
		return time.Duration(p.PeriodSeconds*p.FailureThreshold) * time.Second
	}
	if got := window(c.LivenessProbe); got < 20*time.Minute {
		t.Errorf("liveness restarts a daemon whose IMEX is unready for %s, want at least 20m", got)
	}
	if got, want := window(c.LivenessProbe), window(c.StartupProbe); got < want {
		t.Errorf("liveness window %s is shorter than the start-up window %s", got, want)
	}
	if c.ReadinessProbe.PeriodSeconds != 10 {
		t.Errorf("readiness every %ds, want 10s", c.ReadinessProbe.PeriodSeconds)
	}
}
