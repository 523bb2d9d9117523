package computedomain

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func testReconciler(opts Options) *Reconciler {
	opts.DriverNamespace = testDriverNS
	if opts.DaemonImage == "" {
		opts.DaemonImage = "registry.example.com/cdplane:v1"
	}
	return New(nil, nil, opts)
}

// desiredDaemonSet is the DaemonSet the reconciler renders, with its hash.
func desiredDaemonSet(opts Options) *appsv1.DaemonSet {
	ds := testReconciler(opts).daemonSet(testDomain())
	stampDesiredHash(ds)
	return ds
}

// storedDaemonSet is ds as the apiserver stores and returns it: identity, and every default
// it fills in, written out here as the apiserver documents them (not through withAPIDefaults).
func storedDaemonSet(ds *appsv1.DaemonSet) *appsv1.DaemonSet {
	s := ds.DeepCopy()
	s.UID, s.ResourceVersion, s.Generation = "ds-uid", "42", 3
	s.CreationTimestamp = metav1.Now()
	s.Spec.RevisionHistoryLimit = ptr.To(int32(10))
	if s.Spec.UpdateStrategy.Type == "" {
		s.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: "RollingUpdate", RollingUpdate: &appsv1.RollingUpdateDaemonSet{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)), MaxSurge: ptr.To(intstr.FromInt32(0)),
		}}
	}
	p := &s.Spec.Template.Spec
	p.DNSPolicy, p.RestartPolicy, p.SchedulerName = "ClusterFirst", "Always", "default-scheduler"
	p.SecurityContext = &corev1.PodSecurityContext{}
	p.DeprecatedServiceAccount = p.ServiceAccountName
	for i := range p.Containers {
		c := &p.Containers[i]
		c.ImagePullPolicy, c.TerminationMessagePath, c.TerminationMessagePolicy = "IfNotPresent", "/dev/termination-log", "File"
		for _, pr := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
			pr.SuccessThreshold = 1
		}
		for j := range c.Env {
			if c.Env[j].ValueFrom != nil && c.Env[j].ValueFrom.FieldRef != nil {
				c.Env[j].ValueFrom.FieldRef.APIVersion = "v1"
			}
		}
		for j := range c.Ports {
			c.Ports[j].Protocol = corev1.ProtocolTCP
		}
	}
	s.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, NumberReady: 2}
	return s
}

func TestDesiredHash(t *testing.T) {
	a := desiredDaemonSet(Options{})
	if got := a.Annotations[DesiredHashAnnotation]; len(got) != 16 {
		t.Fatalf("hash %q, want 16 hex digits", got)
	}
	if again := desiredDaemonSet(Options{}); again.Annotations[DesiredHashAnnotation] != a.Annotations[DesiredHashAnnotation] {
		t.Errorf("the same rendering hashes differently: %s, %s", a.Annotations[DesiredHashAnnotation], again.Annotations[DesiredHashAnnotation])
	}
	if h := desiredHash(a); h != a.Annotations[DesiredHashAnnotation] {
		t.Errorf("hash of the stamped object %s, want %s: the annotation must not count", h, a.Annotations[DesiredHashAnnotation])
	}
	cases := map[string]Options{
		"another image":           {DaemonImage: "registry.example.com/cdplane:v2"},
		"other daemon gates":      {DaemonFeatureGates: "CrashOnNVLinkFabricErrors=true"},
		"another update strategy": {DaemonUpdateStrategy: appsv1.RollingUpdateDaemonSetStrategyType},
		"another verbosity":       {DaemonLogVerbosity: 3},
		"daemon metrics on":       {DaemonMetricsPort: 8082},
	}
	for name, opts := range cases {
		if h := desiredDaemonSet(opts).Annotations[DesiredHashAnnotation]; h == a.Annotations[DesiredHashAnnotation] {
			t.Errorf("%s: same hash %s: an upgrade would not be seen", name, h)
		}
	}
	// Moving the daemons' metrics port is a change the live domains must see too.
	if on, moved := desiredDaemonSet(Options{DaemonMetricsPort: 8082}), desiredDaemonSet(Options{DaemonMetricsPort: 9100}); on.Annotations[DesiredHashAnnotation] == moved.Annotations[DesiredHashAnnotation] {
		t.Errorf("daemon metrics port 8082 and 9100: same hash %s", on.Annotations[DesiredHashAnnotation])
	}
}

func TestDaemonSetDrift(t *testing.T) {
	desired := desiredDaemonSet(Options{DaemonMetricsPort: 8082})
	cases := map[string]struct {
		edit func(*appsv1.DaemonSet)
		want []string
	}{
		"as stored: no drift": {},
		"image": {
			edit: func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = "evil:latest" },
			want: []string{"spec.template.spec.containers[0].image"},
		},
		"a command argument": {
			edit: func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Command[1] = "idle" },
			want: []string{"spec.template.spec.containers[0].command"},
		},
		"arguments added": {
			edit: func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Args = []string{"--v=9"} },
			want: []string{"spec.template.spec.containers[0].args"},
		},
		"the metrics port": {
			edit: func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Ports[0].ContainerPort = 9999 },
			want: []string{"spec.template.spec.containers[0].ports"},
		},
		"an environment variable": {
			edit: func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Env[5].Value = "other" },
			want: []string{"spec.template.spec.containers[0].env"},
		},
		"privileged": {
			edit: func(ds *appsv1.DaemonSet) {
				ds.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
			},
			want: []string{"spec.template.spec.containers[0].securityContext"},
		},
		"a host path and a second container": {
			edit: func(ds *appsv1.DaemonSet) {
				ds.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
				ds.Spec.Template.Spec.Containers = append(ds.Spec.Template.Spec.Containers, corev1.Container{Name: "sidecar"})
			},
			want: []string{"spec.template.spec.volumes", "spec.template.spec.containers"},
		},
		"resources": {
			edit: func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Resources.Claims = nil },
			want: []string{"spec.template.spec.containers[0].resources"},
		},
		"a pod label the controller sets": {
			edit: func(ds *appsv1.DaemonSet) { ds.Spec.Template.Labels[managedByLabel] = "someone" },
			want: []string{"spec.template.metadata.labels[" + managedByLabel + "]"},
		},
		"labels and annotations of others stay (kubectl rollout restart)": {
			edit: func(ds *appsv1.DaemonSet) {
				ds.Labels["team"] = "infra"
				ds.Spec.Template.Labels["team"] = "infra"
				ds.Spec.Template.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}
			},
		},
		"update strategy": {
			edit: func(ds *appsv1.DaemonSet) {
				ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType}
			},
			want: []string{"spec.updateStrategy"},
		},
		"hash of another version": {
			edit: func(ds *appsv1.DaemonSet) { ds.Annotations[DesiredHashAnnotation] = "0123456789abcdef" },
			want: []string{"metadata.annotations[" + DesiredHashAnnotation + "]"},
		},
		"no hash: created before hashes": {
			edit: func(ds *appsv1.DaemonSet) { delete(ds.Annotations, DesiredHashAnnotation) },
			want: []string{"metadata.annotations[" + DesiredHashAnnotation + "]"},
		},
		"a default changed by hand": {
			edit: func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.DNSPolicy = corev1.DNSDefault },
			want: []string{"spec.template.spec.dnsPolicy"},
		},
		"the revision history limit is not the controller's": {
			edit: func(ds *appsv1.DaemonSet) { ds.Spec.RevisionHistoryLimit = ptr.To(int32(2)) },
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			current := storedDaemonSet(desired)
			if tc.edit != nil {
				tc.edit(current)
			}
			got := daemonSetDrift(desired, current)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty(), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
				t.Errorf("drift (-want +got):\n%s", diff)
			}
		})
	}
}

// An image without a tag is pulled Always by default: the stored object says so, and that is not
// drift.
func TestDaemonSetDriftImagePullPolicyDefault(t *testing.T) {
	for image, policy := range map[string]corev1.PullPolicy{
		"cdplane":                  corev1.PullAlways,
		"cdplane:latest":           corev1.PullAlways,
		"registry:5000/cdplane":    corev1.PullAlways,
		"registry:5000/cdplane:v1": corev1.PullIfNotPresent,
		"cdplane@sha256:" + strings.Repeat("a", 64): corev1.PullIfNotPresent,
	} {
		desired := desiredDaemonSet(Options{DaemonImage: image})
		current := storedDaemonSet(desired)
		current.Spec.Template.Spec.Containers[0].ImagePullPolicy = policy
		if got := daemonSetDrift(desired, current); len(got) != 0 {
			t.Errorf("image %s stored with pull policy %s: drift %v, want none", image, policy, got)
		}
	}
}

func TestUpdatedDaemonSet(t *testing.T) {
	old := storedDaemonSet(desiredDaemonSet(Options{}))
	old.Labels["team"] = "infra"
	old.Spec.Template.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "then"}
	old.Spec.Template.Spec.Containers[0].Args = []string{"--hand-added"}
	old.Spec.Template.Spec.HostNetwork = true
	desired := desiredDaemonSet(Options{DaemonImage: "registry.example.com/cdplane:v2", DaemonUpdateStrategy: appsv1.RollingUpdateDaemonSetStrategyType})

	got := updatedDaemonSet(desired, old)
	want := old.DeepCopy()
	want.Annotations[DesiredHashAnnotation] = desired.Annotations[DesiredHashAnnotation]
	want.Spec.Template.Spec = desired.Spec.Template.Spec
	want.Spec.UpdateStrategy = desired.Spec.UpdateStrategy
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("updated DaemonSet (-want +got):\n%s", diff)
	}
	if got.ResourceVersion != old.ResourceVersion || got.UID != old.UID {
		t.Errorf("identity %s/%s, want %s/%s: the update must be conditional on the read", got.UID, got.ResourceVersion, old.UID, old.ResourceVersion)
	}
	if drift := daemonSetDrift(desired, storedDaemonSet(got)); len(drift) != 0 {
		t.Errorf("the updated DaemonSet, once stored, still drifts: %v", drift)
	}
	if old.Spec.Template.Spec.Containers[0].Image == got.Spec.Template.Spec.Containers[0].Image {
		t.Errorf("the image did not change")
	}
}

// storedClaimTemplate is rct as the apiserver stores it: exact requests get allocation mode
// ExactCount and count 1, and the opaque parameters may come back with other spacing.
func storedClaimTemplate(rct *resourcev1.ResourceClaimTemplate) *resourcev1.ResourceClaimTemplate {
	s := rct.DeepCopy()
	s.UID, s.ResourceVersion = "rct-uid", "7"
	for i := range s.Spec.Spec.Devices.Requests {
		e := s.Spec.Spec.Devices.Requests[i].Exactly
		e.AllocationMode, e.Count = "ExactCount", 1
	}
	for i := range s.Spec.Spec.Devices.Config {
		o := s.Spec.Spec.Devices.Config[i].Opaque
		o.Parameters = runtime.RawExtension{Raw: []byte(" " + strings.ReplaceAll(string(o.Parameters.Raw), ",", ", ") + "\n")}
	}
	return s
}

func TestClaimTemplateDrift(t *testing.T) {
	r := testReconciler(Options{})
	desired := r.workloadClaimTemplate(testDomain())
	stampDesiredHash(desired)
	cases := map[string]struct {
		edit       func(*resourcev1.ResourceClaimTemplate)
		meta, spec []string
	}{
		"as stored: no drift": {},
		"labels of others stay": {
			edit: func(rct *resourcev1.ResourceClaimTemplate) { rct.Labels["team"] = "infra" },
		},
		"no hash: created before hashes": {
			edit: func(rct *resourcev1.ResourceClaimTemplate) { rct.Annotations = nil },
			meta: []string{"metadata.annotations[" + DesiredHashAnnotation + "]"},
		},
		"owner reference gone": {
			edit: func(rct *resourcev1.ResourceClaimTemplate) { rct.OwnerReferences = nil },
			meta: []string{"metadata.ownerReferences"},
		},
		"the claims' labels (an older version's spec)": {
			edit: func(rct *resourcev1.ResourceClaimTemplate) { delete(rct.Spec.Labels, managedByLabel) },
			spec: []string{"spec.metadata"},
		},
		"no plane selector (an older version's spec)": {
			edit: func(rct *resourcev1.ResourceClaimTemplate) { rct.Spec.Spec.Devices.Requests[0].Exactly.Selectors = nil },
			spec: []string{"spec.spec.devices.requests"},
		},
		"another allocation mode in the config": {
			edit: func(rct *resourcev1.ResourceClaimTemplate) {
				o := rct.Spec.Spec.Devices.Config[0].Opaque
				o.Parameters.Raw = []byte(strings.Replace(string(o.Parameters.Raw), "Single", "All", 1))
			},
			spec: []string{"spec.spec.devices.config"},
		},
		"another driver in the config": {
			edit: func(rct *resourcev1.ResourceClaimTemplate) {
				rct.Spec.Spec.Devices.Config[0].Opaque.Driver = "gpu.nvidia.com"
			},
			spec: []string{"spec.spec.devices.config"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			current := storedClaimTemplate(desired)
			if tc.edit != nil {
				tc.edit(current)
			}
			meta, spec := claimTemplateDrift(desired, current)
			if diff := cmp.Diff(tc.meta, meta, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("metadata drift (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.spec, spec, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("spec drift (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUpdatedClaimTemplateMeta(t *testing.T) {
	desired := testReconciler(Options{}).workloadClaimTemplate(testDomain())
	stampDesiredHash(desired)
	old := storedClaimTemplate(desired)
	old.Annotations = map[string]string{"note": "kept"}
	old.Labels["team"] = "infra"
	stale := desired.OwnerReferences[0]
	stale.BlockOwnerDeletion = nil
	old.OwnerReferences = []metav1.OwnerReference{stale, {APIVersion: "v1", Kind: "ConfigMap", Name: "other", UID: "cm-uid"}}

	got := updatedClaimTemplateMeta(desired, old)
	want := old.DeepCopy()
	want.Annotations[DesiredHashAnnotation] = desired.Annotations[DesiredHashAnnotation]
	want.OwnerReferences = []metav1.OwnerReference{old.OwnerReferences[1], desired.OwnerReferences[0]}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("updated template (-want +got):\n%s", diff)
	}
	if meta, spec := claimTemplateDrift(desired, got); len(meta)+len(spec) != 0 {
		t.Errorf("the updated template still drifts: %v %v", meta, spec)
	}
}

func TestDaemonMetricsPortOption(t *testing.T) {
	for port, want := range map[int32]string{0: "", 8082: "", 50000: "IMEX's", 50005: "IMEX's", 70000: "up to 65535", -1: "up to 65535"} {
		o := Options{DriverNamespace: testDriverNS, DaemonMetricsPort: port}
		o.Defaults()
		err := o.Validate()
		if (want == "") != (err == nil) || (err != nil && (!strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--daemon-metrics-port"))) {
			t.Errorf("--daemon-metrics-port %d: Validate() = %v, want %q", port, err, want)
		}
	}
}

func TestDaemonUpdateStrategyOption(t *testing.T) {
	cases := map[string]struct {
		strategy appsv1.DaemonSetUpdateStrategyType
		want     appsv1.DaemonSetUpdateStrategyType
		err      bool
	}{
		"default: OnDelete": {want: appsv1.OnDeleteDaemonSetStrategyType},
		"RollingUpdate":     {strategy: appsv1.RollingUpdateDaemonSetStrategyType, want: appsv1.RollingUpdateDaemonSetStrategyType},
		"unknown":           {strategy: "Recreate", err: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := Options{DriverNamespace: testDriverNS, DaemonUpdateStrategy: tc.strategy}
			o.Defaults()
			err := o.Validate()
			if tc.err {
				if err == nil || !strings.Contains(err.Error(), "--daemon-update-strategy") {
					t.Errorf("Validate() = %v, want an error naming --daemon-update-strategy", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.DaemonUpdateStrategy != tc.want {
				t.Errorf("strategy %s, want %s", o.DaemonUpdateStrategy, tc.want)
			}
		})
	}
}

// TestWithCliquesGateOf: a live DaemonSet's ComputeDomainCliques value (or its absence) replaces
// the rendered one; the other gates keep their values and order.
func TestWithCliquesGateOf(t *testing.T) {
	for name, tc := range map[string]struct{ gates, live, want string }{
		"flipped off, live on":   {"A=true,ComputeDomainCliques=false", "A=true,ComputeDomainCliques=true", "A=true,ComputeDomainCliques=true"},
		"flipped on, live off":   {"A=true,ComputeDomainCliques=true", "A=false,ComputeDomainCliques=false", "A=true,ComputeDomainCliques=false"},
		"live from before":       {"A=true,B=false,ComputeDomainCliques=true", "A=true,B=false", "A=true,B=false"},
		"same":                   {"A=true,ComputeDomainCliques=true", "A=true,ComputeDomainCliques=true", "A=true,ComputeDomainCliques=true"},
		"other gates go as told": {"A=false,ComputeDomainCliques=true", "A=true,ComputeDomainCliques=true", "A=false,ComputeDomainCliques=true"},
	} {
		if got := withCliquesGateOf(tc.gates, tc.live); got != tc.want {
			t.Errorf("%s: withCliquesGateOf(%q, %q) = %q, want %q", name, tc.gates, tc.live, got, tc.want)
		}
	}
}
