package charts

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/action"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"cdplane/internal/features"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

const planeLabel = "resource.nvidia.com/control-plane-id"

// id20 is the longest valid id: some names derived from it pass 63 characters and are hashed.
const id20 = "abcdefghij-klmnopq-r"

func renderPlane(t *testing.T, id string, extra map[string]any) []Manifest {
	t.Helper()
	values := map[string]any{"controlPlaneID": id}
	for k, v := range extra {
		values[k] = v
	}
	ns := plane.Name(id, plane.DriverNamespaceLegacyName)
	ms, err := Render(Plane, ns, ns, testutil.WithImage(values))
	if err != nil {
		t.Fatalf("rendering plane %q: %v", id, err)
	}
	return ms
}

func toYAML(t *testing.T, ms []Manifest) string {
	t.Helper()
	var b strings.Builder
	for _, m := range ms {
		data, err := yaml.Marshal(m.Object.Object)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "---\n# Source: %s\n%s", m.Template, data)
	}
	return b.String()
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./deployments/helm -update to write it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs from the rendered chart (-golden +rendered); run go test ./deployments/helm -update if intended:\n%s", path, diff)
	}
}

func TestGolden(t *testing.T) {
	for name, id := range map[string]string{"legacy": "", "plane-a": "plane-a", "id20": id20} {
		t.Run(name, func(t *testing.T) {
			checkGolden(t, "cdplane-"+name+".yaml", toYAML(t, renderPlane(t, id, nil)))
		})
	}
	t.Run("take-over", func(t *testing.T) {
		checkGolden(t, "cdplane-take-over.yaml", toYAML(t, renderPlane(t, "plane-a", map[string]any{"takeOver": map[string]any{"fromNamespace": "nvidia-dra-driver-gpu"}})))
	})
	t.Run("prerequisites", func(t *testing.T) {
		ms, err := Render(Prerequisites, Prerequisites, "kube-system", nil)
		if err != nil {
			t.Fatal(err)
		}
		checkGolden(t, "cdplane-prerequisites.yaml", toYAML(t, ms))
	})
}

func TestSchemaRefusesBadIDs(t *testing.T) {
	for name, tc := range map[string]struct{ id, want string }{
		"upper case":       {"Plane-A", "controlPlaneID"},
		"underscore":       {"plane_a", "controlPlaneID"},
		"leading dash":     {"-plane", "controlPlaneID"},
		"trailing dash":    {"plane-", "controlPlaneID"},
		"21 characters":    {strings.Repeat("a", 21), "controlPlaneID"},
		"reserved default": {"default", "controlPlaneID"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Render(Plane, "x", plane.Name(tc.id, "cdplane"), testutil.WithImage(map[string]any{"controlPlaneID": tc.id}))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("render with controlPlaneID %q: error %v, want one naming %s", tc.id, err, tc.want)
			}
			// The plane package's validator agrees.
			if plane.ValidateID(tc.id) == nil {
				t.Errorf("plane.ValidateID(%q) accepted what the schema refuses", tc.id)
			}
		})
	}
	for _, id := range []string{"", "plane-a", id20, "a"} {
		if _, err := Render(Plane, "x", plane.Name(id, "cdplane"), testutil.WithImage(map[string]any{"controlPlaneID": id})); err != nil {
			t.Errorf("render with valid controlPlaneID %q: %v", id, err)
		}
	}
}

// TestReleaseNamespaceIsTheDriverNamespace: the admission policies identify a plane's accounts
// by the driver namespace derived from its id, so the chart refuses any other namespace.
func TestReleaseNamespaceIsTheDriverNamespace(t *testing.T) {
	for id, ns := range map[string]string{"": "kube-system", "plane-a": "cdplane", "plane-b": "plane-a-cdplane"} {
		_, err := Render(Plane, "x", ns, testutil.WithImage(map[string]any{"controlPlaneID": id}))
		if err == nil || !strings.Contains(err.Error(), "must be the plane's driver namespace") {
			t.Errorf("plane %q in namespace %s: %v, want a refusal naming the driver namespace", id, ns, err)
		}
	}
}

func TestPlaneRendersNoCRDs(t *testing.T) {
	ch, err := Load(Plane)
	if err != nil {
		t.Fatal(err)
	}
	if crds := ch.CRDObjects(); len(crds) > 0 {
		t.Errorf("the plane chart ships %d CRDs in crds/", len(crds))
	}
	for _, id := range []string{"", "plane-a"} {
		for _, m := range renderPlane(t, id, nil) {
			if m.Object.GetKind() == "CustomResourceDefinition" {
				t.Errorf("plane %q renders CRD %s from %s", id, m.Object.GetName(), m.Template)
			}
		}
	}
}

func TestLegacyCarriesNoTraceOfPlanes(t *testing.T) {
	for _, m := range renderPlane(t, "", map[string]any{"secretMirror": map[string]any{"selector": "a=b"}}) {
		o := m.Object
		if _, ok := o.GetLabels()[planeLabel]; ok {
			t.Errorf("legacy %s %s carries the plane label", o.GetKind(), o.GetName())
		}
		if strings.Contains(toYAML(t, []Manifest{m}), "control-plane-id=") {
			t.Errorf("legacy %s %s passes a control-plane id", o.GetKind(), o.GetName())
		}
	}
}

// TestNamesDerived: with an id every object is labelled for the plane, every name is the
// derived name of the legacy plane's (plane.Name, hashed past 63), and every namespaced object
// lives in the plane's driver namespace.
func TestNamesDerived(t *testing.T) {
	// The legacy plane binds its namespaced roles cluster-wide (it owns every unassigned
	// namespace); a plane with an id gets them through `cdplane assign namespace`.
	legacy := slices.DeleteFunc(renderPlane(t, "", nil), func(m Manifest) bool {
		return m.Object.GetKind() == "ClusterRoleBinding" && strings.HasSuffix(m.Object.GetName(), "-namespaced")
	})
	for _, id := range []string{"plane-a", id20} {
		t.Run(id, func(t *testing.T) {
			got := renderPlane(t, id, nil)
			if len(got) != len(legacy) {
				t.Fatalf("plane %q renders %d objects, legacy %d", id, len(got), len(legacy))
			}
			for i, m := range got {
				o, l := m.Object, legacy[i].Object
				if o.GetKind() != l.GetKind() {
					t.Fatalf("object %d: kind %s, legacy %s", i, o.GetKind(), l.GetKind())
				}
				if o.GetLabels()[planeLabel] != id {
					t.Errorf("%s %s: plane label %q, want %q", o.GetKind(), o.GetName(), o.GetLabels()[planeLabel], id)
				}
				want := plane.Name(id, l.GetName())
				if o.GetNamespace() != "" {
					if ns := plane.Name(id, "cdplane"); o.GetNamespace() != ns {
						t.Errorf("%s %s in namespace %s, want %s", o.GetKind(), o.GetName(), o.GetNamespace(), ns)
					}
				}
				if o.GetName() != want {
					t.Errorf("%s: name %q, want %q (legacy %q)", o.GetKind(), o.GetName(), want, l.GetName())
				}
				if len(o.GetName()) > 63 {
					t.Errorf("%s %s: name longer than 63 characters", o.GetKind(), o.GetName())
				}
			}
		})
	}
}

func TestPlaneArguments(t *testing.T) {
	ms := renderPlane(t, "plane-a", map[string]any{"featureGates": map[string]any{"ComputeDomainCliques": false, "CrashOnNVLinkFabricErrors": true}})
	text := toYAML(t, ms)
	for _, want := range []string{
		"--control-plane-id=plane-a",
		"--feature-gates=ComputeDomainCliques=false,CrashOnNVLinkFabricErrors=true",
		"--daemon-service-account=plane-a-cdplane-daemon",
		"--leader-election-id=plane-a-cdplane-controller",
		"key: resource.nvidia.com/control-plane-id",
		"request.userInfo.username == 'system:serviceaccount:plane-a-cdplane:plane-a-cdplane-controller'",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("plane-a render lacks %q", want)
		}
	}
}

func TestHelmLint(t *testing.T) {
	for _, dir := range []string{Prerequisites, Plane} {
		valueSets := []map[string]any{nil}
		if dir == Plane {
			valueSets = append(valueSets, map[string]any{"controlPlaneID": "plane-a"})
		}
		for _, vals := range valueSets {
			lint := action.NewLint()
			lint.Strict = true
			lint.Namespace = "cdplane"
			if id, _ := vals["controlPlaneID"].(string); id != "" {
				lint.Namespace = plane.Name(id, plane.DriverNamespaceLegacyName)
			}
			res := lint.Run([]string{dir}, vals)
			var msgs []string
			for _, m := range res.Messages {
				msgs = append(msgs, m.Error())
			}
			for _, err := range res.Errors {
				msgs = append(msgs, err.Error())
			}
			// "icon is recommended" is advice for chart repositories, which these are not.
			msgs = slices.DeleteFunc(msgs, func(s string) bool { return strings.Contains(s, "icon is recommended") })
			if len(msgs) > 0 {
				t.Errorf("helm lint --strict %s %v:\n%s", dir, vals, strings.Join(msgs, "\n"))
			}
		}
	}
}

// TestPluginRunsOnlyOnGPUNodes: the kubelet plugin's DaemonSet selects the plane's nodes that
// carry a GPU label (one node-affinity term per label, each with the plane requirement);
// with no GPU labels configured, every node of the plane.
func TestPluginRunsOnlyOnGPUNodes(t *testing.T) {
	terms := func(extra map[string]any) []any {
		for _, m := range renderPlane(t, "plane-a", extra) {
			if m.Object.GetKind() != "DaemonSet" {
				continue
			}
			got, _, err := unstructured.NestedSlice(m.Object.Object, "spec", "template", "spec", "affinity", "nodeAffinity",
				"requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		t.Fatal("no DaemonSet rendered")
		return nil
	}
	def := terms(nil)
	if len(def) != 2 {
		t.Fatalf("default: %d node-affinity terms, want 2 (one per GPU label): %v", len(def), def)
	}
	for i, want := range []string{"feature.node.kubernetes.io/pci-10de.present", "nvidia.com/gpu.present"} {
		exprs := def[i].(map[string]any)["matchExpressions"].([]any)
		if len(exprs) != 2 || exprs[0].(map[string]any)["key"] != "resource.nvidia.com/control-plane-id" || exprs[1].(map[string]any)["key"] != want {
			t.Errorf("term %d: %v, want the plane requirement and %s", i, exprs, want)
		}
	}
	if all := terms(map[string]any{"kubeletPlugin": map[string]any{"gpuNodeLabels": []any{}}}); len(all) != 1 ||
		len(all[0].(map[string]any)["matchExpressions"].([]any)) != 1 {
		t.Errorf("no GPU labels: %v, want the plane requirement alone", all)
	}
}

// TestHostManagedIMEX: the host-managed mode needs its gate; with it, the controller is told
// the mode and the plugin gets the mode, its socket and its driver root in the environment (for
// its readiness probe, the host-IMEX check), keeps the node's clique label, and is probed.
func TestHostManagedIMEX(t *testing.T) {
	_, err := Render(Plane, "x", "plane-a-cdplane", testutil.WithImage(map[string]any{"controlPlaneID": "plane-a", "imex": map[string]any{"mode": "hostManaged"}}))
	if err == nil || !strings.Contains(err.Error(), "imex.mode=hostManaged requires featureGates.HostManagedIMEXDaemon=true") {
		t.Fatalf("hostManaged without the gate: %v, want a refusal naming the gate", err)
	}
	if _, err := Render(Plane, "x", "plane-a-cdplane", testutil.WithImage(map[string]any{"controlPlaneID": "plane-a", "imex": map[string]any{"mode": "HostManaged"}})); err == nil {
		t.Fatal("an unknown imex.mode rendered")
	}
	ms := renderPlane(t, "plane-a", map[string]any{
		"featureGates": map[string]any{"HostManagedIMEXDaemon": true},
		"imex":         map[string]any{"mode": "hostManaged", "hostSocketPath": "/run/imex/ctl.sock"},
	})
	checkGolden(t, "cdplane-host-managed.yaml", toYAML(t, ms))
}

// object returns the one rendered object of kind.
func object(t *testing.T, ms []Manifest, kind string) map[string]any {
	t.Helper()
	var found map[string]any
	for _, m := range ms {
		if m.Object.GetKind() == kind {
			if found != nil {
				t.Fatalf("more than one %s rendered", kind)
			}
			found = m.Object.Object
		}
	}
	if found == nil {
		t.Fatalf("no %s rendered", kind)
	}
	return found
}

// podSpec returns the pod template's spec of the one rendered object of kind.
func podSpec(t *testing.T, ms []Manifest, kind string) map[string]any {
	t.Helper()
	spec, ok, err := unstructured.NestedMap(object(t, ms, kind), "spec", "template", "spec")
	if err != nil || !ok {
		t.Fatalf("%s has no pod template spec: %v", kind, err)
	}
	return spec
}

// container returns the single container of the pod template of kind.
func container(t *testing.T, ms []Manifest, kind string) map[string]any {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(podSpec(t, ms, kind), "containers")
	if len(cs) != 1 {
		t.Fatalf("%s: %d containers, want 1", kind, len(cs))
	}
	return cs[0].(map[string]any)
}

func args(t *testing.T, ms []Manifest, kind string) []string {
	t.Helper()
	got, _, err := unstructured.NestedStringSlice(container(t, ms, kind), "args")
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestNVIDIAValueArguments: the values NVIDIA's chart also has reach the components' flags.
func TestNVIDIAValueArguments(t *testing.T) {
	for name, tc := range map[string]struct {
		values        map[string]any
		kind          string
		want, notWant []string
	}{
		"leader election by default": {
			kind: "Deployment",
			want: []string{"--leader-elect=true", "--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s",
				"--leader-elect-retry-period=2s", "--leader-election-id=plane-a-cdplane-controller"},
		},
		"leader election off": {
			values:  map[string]any{"controller": map[string]any{"leaderElection": map[string]any{"enabled": false}}},
			kind:    "Deployment",
			want:    []string{"--leader-elect=false"},
			notWant: []string{"--leader-elect=true", "--leader-elect-lease-duration=15s", "--leader-election-id=plane-a-cdplane-controller"},
		},
		"metrics by default on the pod IP": {
			kind: "Deployment",
			want: []string{"--metrics-bind-address=$(POD_IP):8080", "--health-probe-bind-address=$(POD_IP):8081"},
		},
		"metrics off": {
			values:  map[string]any{"controller": map[string]any{"metrics": map[string]any{"enabled": false}}},
			kind:    "Deployment",
			want:    []string{"--metrics-bind-address=0", "--health-probe-bind-address=$(POD_IP):8081"},
			notWant: []string{"--metrics-bind-address=$(POD_IP):8080"},
		},
		"metrics endpoint": {
			values: map[string]any{"controller": map[string]any{"metrics": map[string]any{"httpEndpoint": ":9090"}}},
			kind:   "Deployment",
			want:   []string{"--metrics-bind-address=:9090"},
		},
		"logVerbosity as NVIDIA writes it, daemons included": {
			values: map[string]any{"logVerbosity": "4"},
			kind:   "Deployment",
			want:   []string{"--v=4", "--daemon-log-verbosity=4"},
		},
		"logVerbosity of the plugin": {
			values: map[string]any{"logVerbosity": 3},
			kind:   "DaemonSet",
			want:   []string{"--v=3"},
		},
		"daemon.logVerbosity zero wins": {
			values: map[string]any{"logVerbosity": 3, "daemon": map[string]any{"logVerbosity": 0}},
			kind:   "Deployment",
			want:   []string{"--v=3", "--daemon-log-verbosity=0"},
		},
		"daemon priority class": {
			values: map[string]any{"daemon": map[string]any{"priorityClassName": "system-node-critical"}},
			kind:   "Deployment",
			want:   []string{"--daemon-priority-class=system-node-critical"},
		},
		"no daemon priority class by default": {
			kind:    "Deployment",
			notWant: []string{"--daemon-priority-class=system-node-critical", "--daemon-priority-class="},
		},
		"nvidiaDriverRoot": {
			values: map[string]any{"nvidiaDriverRoot": "/run/nvidia/driver"},
			kind:   "DaemonSet",
			want:   []string{"--nvidia-driver-root=/run/nvidia/driver"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := args(t, renderPlane(t, "plane-a", tc.values), tc.kind)
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("%s args lack %s: %q", tc.kind, w, got)
				}
			}
			for _, n := range tc.notWant {
				if slices.ContainsFunc(got, func(a string) bool { return a == n || strings.HasSuffix(n, "=") && strings.HasPrefix(a, n) }) {
					t.Errorf("%s args hold %s: %q", tc.kind, n, got)
				}
			}
		})
	}
}

// TestNVIDIAValuePodSpecs: pod-level values NVIDIA's chart also has land where they land there.
func TestNVIDIAValuePodSpecs(t *testing.T) {
	def := renderPlane(t, "plane-a", nil)
	for _, kind := range []string{"Deployment", "DaemonSet"} {
		if pc, ok := podSpec(t, def, kind)["priorityClassName"]; ok {
			t.Errorf("%s: priority class %v by default, want none", kind, pc)
		}
	}
	if sc := container(t, def, "DaemonSet")["securityContext"]; !cmp.Equal(sc, map[string]any{"privileged": true}) {
		t.Errorf("plugin container security context %v by default, want privileged", sc)
	}
	if s, _, _ := unstructured.NestedMap(object(t, def, "DaemonSet"), "spec", "updateStrategy"); !cmp.Equal(s,
		map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxUnavailable": "100%"}}) {
		t.Errorf("plugin update strategy %v by default, want RollingUpdate with maxUnavailable 100%%", s)
	}
	if ports, _, _ := unstructured.NestedSlice(container(t, def, "Deployment"), "ports"); !slices.ContainsFunc(ports, func(p any) bool {
		return p.(map[string]any)["name"] == "metrics" && p.(map[string]any)["containerPort"] == float64(8080)
	}) {
		t.Errorf("controller ports %v by default, want metrics on 8080", ports)
	}

	ms := renderPlane(t, "plane-a", map[string]any{
		"imagePullSecrets": []any{map[string]any{"name": "regcred"}},
		"controller": map[string]any{
			"priorityClassName":  "system-node-critical",
			"podAnnotations":     map[string]any{"a": "b"},
			"podSecurityContext": map[string]any{"fsGroup": 2000},
			"securityContext":    map[string]any{"runAsUser": 1000},
			"metrics":            map[string]any{"httpEndpoint": ":9090"},
		},
		"kubeletPlugin": map[string]any{
			"priorityClassName":  "system-node-critical",
			"podAnnotations":     map[string]any{"c": "d"},
			"podSecurityContext": map[string]any{"seLinuxOptions": map[string]any{"type": "spc_t"}},
			"securityContext":    nil,
			"updateStrategy":     map[string]any{"rollingUpdate": map[string]any{"maxUnavailable": 1}},
		},
	})
	for kind, want := range map[string]map[string]any{
		"Deployment": {"priorityClassName": "system-node-critical", "securityContext": map[string]any{"fsGroup": float64(2000)}},
		"DaemonSet":  {"priorityClassName": "system-node-critical", "securityContext": map[string]any{"seLinuxOptions": map[string]any{"type": "spc_t"}}},
	} {
		spec := podSpec(t, ms, kind)
		for k, v := range want {
			if diff := cmp.Diff(v, spec[k]); diff != "" {
				t.Errorf("%s pod spec %s (-want +got):\n%s", kind, k, diff)
			}
		}
		if diff := cmp.Diff([]any{map[string]any{"name": "regcred"}}, spec["imagePullSecrets"]); diff != "" {
			t.Errorf("%s imagePullSecrets (-want +got):\n%s", kind, diff)
		}
	}
	for kind, want := range map[string]map[string]any{"Deployment": {"a": "b"}, "DaemonSet": {"c": "d"}} {
		got, _, _ := unstructured.NestedMap(object(t, ms, kind), "spec", "template", "metadata", "annotations")
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s pod annotations (-want +got):\n%s", kind, diff)
		}
	}
	// Helm merges the controller's security context over the default's.
	if sc := container(t, ms, "Deployment")["securityContext"].(map[string]any); sc["runAsUser"] != float64(1000) || sc["readOnlyRootFilesystem"] != true {
		t.Errorf("controller container security context %v, want runAsUser 1000 over the defaults", sc)
	}
	// A security context without privileged (here null) still gives a privileged plugin.
	if sc := container(t, ms, "DaemonSet")["securityContext"]; !cmp.Equal(sc, map[string]any{"privileged": true}) {
		t.Errorf("plugin container security context %v, want privileged", sc)
	}
	if s, _, _ := unstructured.NestedMap(object(t, ms, "DaemonSet"), "spec", "updateStrategy"); !cmp.Equal(s,
		map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxUnavailable": float64(1)}}) {
		t.Errorf("plugin update strategy %v, want RollingUpdate with maxUnavailable 1", s)
	}
	if ports, _, _ := unstructured.NestedSlice(container(t, ms, "Deployment"), "ports"); !slices.ContainsFunc(ports, func(p any) bool {
		return p.(map[string]any)["name"] == "metrics" && p.(map[string]any)["containerPort"] == float64(9090)
	}) {
		t.Errorf("controller ports %v, want metrics on 9090", ports)
	}
	off := renderPlane(t, "plane-a", map[string]any{"controller": map[string]any{"metrics": map[string]any{"enabled": false}}})
	if ports, _, _ := unstructured.NestedSlice(container(t, off, "Deployment"), "ports"); slices.ContainsFunc(ports, func(p any) bool {
		return p.(map[string]any)["name"] == "metrics"
	}) {
		t.Errorf("controller ports %v with metrics off, want no metrics port", ports)
	}
}

// TestServiceAccountValues: serviceAccount.annotations reach all three accounts; with
// create=false none is rendered and the pods still run as the plane's accounts.
func TestServiceAccountValues(t *testing.T) {
	ms := renderPlane(t, "plane-a", map[string]any{"serviceAccount": map[string]any{"annotations": map[string]any{"iam.example/role": "r"}}})
	var names []string
	for _, m := range ms {
		if m.Object.GetKind() == "ServiceAccount" {
			names = append(names, m.Object.GetName())
			if diff := cmp.Diff(map[string]string{"iam.example/role": "r"}, m.Object.GetAnnotations()); diff != "" {
				t.Errorf("ServiceAccount %s annotations (-want +got):\n%s", m.Object.GetName(), diff)
			}
		}
	}
	if want := []string{"plane-a-cdplane-controller", "plane-a-cdplane-daemon", "plane-a-cdplane-kubelet-plugin"}; !cmp.Equal(names, want) {
		t.Errorf("ServiceAccounts %v, want %v", names, want)
	}

	none := renderPlane(t, "plane-a", map[string]any{"serviceAccount": map[string]any{"create": false}})
	for _, m := range none {
		if m.Object.GetKind() == "ServiceAccount" {
			t.Errorf("create=false renders ServiceAccount %s", m.Object.GetName())
		}
	}
	for kind, want := range map[string]string{"Deployment": "plane-a-cdplane-controller", "DaemonSet": "plane-a-cdplane-kubelet-plugin"} {
		if got := podSpec(t, none, kind)["serviceAccountName"]; got != want {
			t.Errorf("create=false: %s runs as %v, want %s", kind, got, want)
		}
	}
	if !slices.Contains(args(t, none, "Deployment"), "--daemon-service-account=plane-a-cdplane-daemon") {
		t.Error("create=false: the daemons no longer run as the plane's daemon account")
	}
}

// TestNVIDIAValueRefusals: a value the chart would otherwise ignore while it changes what the
// cluster gets is refused, naming cdplane's value where there is one.
func TestNVIDIAValueRefusals(t *testing.T) {
	for name, tc := range map[string]struct {
		values map[string]any
		want   string
	}{
		"leader election off with two replicas": {
			map[string]any{"controller": map[string]any{"replicas": 2, "leaderElection": map[string]any{"enabled": false}}},
			"use one replica",
		},
		"metrics on the health probes' port": {
			map[string]any{"controller": map[string]any{"metrics": map[string]any{"httpEndpoint": ":8081"}}},
			"port 8081 is the controller's health probes'",
		},
		"metrics endpoint without a port": {map[string]any{"controller": map[string]any{"metrics": map[string]any{"httpEndpoint": "0.0.0.0"}}}, "httpEndpoint"},
		"another metrics path":            {map[string]any{"controller": map[string]any{"metrics": map[string]any{"metricsPath": "/m"}}}, "metricsPath"},
		"profiles":                        {map[string]any{"controller": map[string]any{"metrics": map[string]any{"profilePath": "/debug/pprof"}}}, "profilePath"},
		"verbosity not a number":          {map[string]any{"logVerbosity": "high"}, "logVerbosity"},
		"unknown gate":                    {map[string]any{"featureGates": map[string]any{"MPSSupport": true}}, "featureGates.MPSSupport: cdplane has no such gate"},
		"unprivileged plugin":             {map[string]any{"kubeletPlugin": map[string]any{"securityContext": map[string]any{"privileged": false}}}, "privileged"},
		"service account name":            {map[string]any{"serviceAccount": map[string]any{"name": "sa"}}, "serviceAccount.name (NVIDIA's chart) is not supported"},
		"nameOverride":                    {map[string]any{"nameOverride": "x"}, "nameOverride (NVIDIA's chart) is not supported"},
		"namespaceOverride":               {map[string]any{"namespaceOverride": "x"}, "namespaceOverride (NVIDIA's chart) is not supported"},
		"compute domains off": {
			map[string]any{"resources": map[string]any{"computeDomains": map[string]any{"enabled": false}}},
			"this chart runs ComputeDomains only",
		},
		"NVIDIA's IMEX mode": {
			map[string]any{"resources": map[string]any{"computeDomains": map[string]any{"imex": map[string]any{"mode": "hostManaged"}}}},
			"set imex.mode",
		},
		"NVIDIA's host socket": {
			map[string]any{"resources": map[string]any{"computeDomains": map[string]any{"imex": map[string]any{"hostSocketPath": "/run/imex.sock"}}}},
			"set imex.hostSocketPath",
		},
		"channel isolation": {
			map[string]any{"resources": map[string]any{"computeDomains": map[string]any{"imex": map[string]any{"isolation": "channel"}}}},
			"only domain isolation",
		},
		"NVIDIA's controller resources": {
			map[string]any{"controller": map[string]any{"containers": map[string]any{"computeDomain": map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "1Gi"}}}}}},
			"set controller.resources",
		},
		"NVIDIA's controller security context": {
			map[string]any{"controller": map[string]any{"containers": map[string]any{"computeDomain": map[string]any{"securityContext": map[string]any{"runAsUser": 1}}}}},
			"set controller.securityContext",
		},
		"NVIDIA's controller environment": {
			map[string]any{"controller": map[string]any{"containers": map[string]any{"computeDomain": map[string]any{"env": []any{map[string]any{"name": "ADDITIONAL_NAMESPACES", "value": "a"}}}}}},
			"not from its environment",
		},
		"NVIDIA's plugin resources": {
			map[string]any{"kubeletPlugin": map[string]any{"containers": map[string]any{"computeDomains": map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "1Gi"}}}}}},
			"set kubeletPlugin.resources",
		},
		"NVIDIA's plugin security context": {
			map[string]any{"kubeletPlugin": map[string]any{"containers": map[string]any{"computeDomains": map[string]any{"securityContext": map[string]any{"privileged": true, "runAsUser": 0}}}}},
			"set kubeletPlugin.securityContext",
		},
		"NVIDIA's clique label": {
			map[string]any{"kubeletPlugin": map[string]any{"containers": map[string]any{"computeDomains": map[string]any{"gpuCliqueLabelEnabled": true}}}},
			"set kubeletPlugin.nodeCliqueLabel",
		},
		"NVIDIA's plugins directory": {
			map[string]any{"kubeletPlugin": map[string]any{"kubeletPluginsDirectoryPath": "/var/lib/k0s/kubelet/plugins"}},
			"set kubeletPlugin.kubeletDir",
		},
		"NVIDIA's registrar directory": {
			map[string]any{"kubeletPlugin": map[string]any{"kubeletRegistrarDirectoryPath": "/var/lib/k0s/kubelet/plugins_registry"}},
			"set kubeletPlugin.kubeletDir",
		},
		"network policy": {
			map[string]any{"controller": map[string]any{"networkPolicy": map[string]any{"enabled": true}}},
			"controller.networkPolicy.enabled (NVIDIA's chart): this chart ships no NetworkPolicy",
		},
	} {
		t.Run(name, func(t *testing.T) {
			vals := map[string]any{"controlPlaneID": "plane-a"}
			maps.Copy(vals, tc.values)
			_, err := Render(Plane, "plane-a-cdplane", "plane-a-cdplane", testutil.WithImage(vals))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("render: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// What agrees with cdplane's own values passes.
	for name, vals := range map[string]map[string]any{
		"NVIDIA's host-managed mode with cdplane's": {
			"featureGates": map[string]any{"HostManagedIMEXDaemon": true},
			"imex":         map[string]any{"mode": "hostManaged"},
			"resources":    map[string]any{"computeDomains": map[string]any{"imex": map[string]any{"mode": "hostManaged"}}},
		},
		"NVIDIA's clique label with cdplane's": {
			"kubeletPlugin": map[string]any{"nodeCliqueLabel": true, "containers": map[string]any{"computeDomains": map[string]any{"gpuCliqueLabelEnabled": true}}},
		},
		"NVIDIA's directories under kubeletDir": {
			"kubeletPlugin": map[string]any{"kubeletDir": "/var/lib/k0s/kubelet", "kubeletPluginsDirectoryPath": "/var/lib/k0s/kubelet/plugins/",
				"kubeletRegistrarDirectoryPath": "/var/lib/k0s/kubelet/plugins_registry"},
		},
		"leader election off with one replica": {"controller": map[string]any{"leaderElection": map[string]any{"enabled": false}}},
	} {
		t.Run(name, func(t *testing.T) { renderPlane(t, "plane-a", vals) })
	}
}

// TestNVIDIAChartDefaults: NVIDIA's chart's default values, as a team brings them, are accepted
// and mean what they meant there.
func TestNVIDIAChartDefaults(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "nvidia-chart-defaults.values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{}
	if err := yaml.Unmarshal(data, &vals); err != nil {
		t.Fatal(err)
	}
	ms := renderPlane(t, "plane-a", vals)
	got := args(t, ms, "Deployment")
	for _, want := range []string{"--v=4", "--daemon-log-verbosity=4", "--leader-elect=false", "--metrics-bind-address=:8080"} {
		if !slices.Contains(got, want) {
			t.Errorf("controller args lack %s: %q", want, got)
		}
	}
	for _, kind := range []string{"Deployment", "DaemonSet"} {
		if pc := podSpec(t, ms, kind)["priorityClassName"]; pc != "system-node-critical" {
			t.Errorf("%s priority class %v, want system-node-critical", kind, pc)
		}
	}
	if got := podSpec(t, ms, "Deployment")["tolerations"]; len(got.([]any)) != 3 {
		t.Errorf("controller tolerations %v, want NVIDIA's three", got)
	}
}

// TestFeatureGateNames: the chart accepts exactly the gates the components register.
func TestFeatureGateNames(t *testing.T) {
	ch, err := Load(Plane)
	if err != nil {
		t.Fatal(err)
	}
	var chart []string
	for _, f := range ch.Templates {
		if f.Name != "templates/_helpers.tpl" {
			continue
		}
		m := regexp.MustCompile(`(?s)define "cdplane.featureGateNames" -}}\s*(\S+)\s*{{- end`).FindSubmatch(f.Data)
		if m == nil {
			t.Fatal("no cdplane.featureGateNames in _helpers.tpl")
		}
		chart = strings.Split(string(m[1]), ",")
	}
	var gates []string
	for g := range features.NewGates().GetAll() {
		gates = append(gates, string(g))
	}
	slices.Sort(gates)
	if diff := cmp.Diff(gates, chart); diff != "" {
		t.Errorf("cdplane.featureGateNames differs from the components' gates (-components +chart):\n%s", diff)
	}
	all := map[string]any{}
	for _, g := range gates {
		all[g] = false
	}
	renderPlane(t, "plane-a", map[string]any{"featureGates": all})
}

// TestNVIDIAValuesGolden: the chart with the values it shares with NVIDIA's chart set away from
// their defaults.
func TestNVIDIAValuesGolden(t *testing.T) {
	ms := renderPlane(t, "plane-a", map[string]any{
		"nvidiaDriverRoot": "/run/nvidia/driver",
		"logVerbosity":     "4",
		"featureGates":     map[string]any{"ComputeDomainCliques": true},
		"imagePullSecrets": []any{map[string]any{"name": "regcred"}},
		"image":            map[string]any{"repository": "registry.example/cdplane", "tag": "0.1.0", "pullPolicy": "Always"},
		"serviceAccount":   map[string]any{"annotations": map[string]any{"iam.example/role": "cdplane"}},
		"controller": map[string]any{
			"leaderElection":     map[string]any{"enabled": true, "leaseDuration": "30s", "renewDeadline": "20s", "retryPeriod": "4s"},
			"metrics":            map[string]any{"enabled": true, "httpEndpoint": ":9090", "metricsPath": "/metrics", "profilePath": ""},
			"priorityClassName":  "system-node-critical",
			"podAnnotations":     map[string]any{"prometheus.io/scrape": "true"},
			"podSecurityContext": map[string]any{"runAsGroup": 65532},
			"securityContext":    map[string]any{"seccompProfile": map[string]any{"type": "RuntimeDefault"}},
			"affinity": map[string]any{"nodeAffinity": map[string]any{"preferredDuringSchedulingIgnoredDuringExecution": []any{
				map[string]any{"weight": 100, "preference": map[string]any{"matchExpressions": []any{
					map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}}}}}}},
		},
		"daemon": map[string]any{"priorityClassName": "system-node-critical"},
		"kubeletPlugin": map[string]any{
			"priorityClassName":  "system-node-critical",
			"podAnnotations":     map[string]any{"example/owner": "gpu-team"},
			"podSecurityContext": map[string]any{"seLinuxOptions": map[string]any{"type": "spc_t"}},
			"securityContext":    map[string]any{"seccompProfile": map[string]any{"type": "Unconfined"}},
			"updateStrategy":     map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxUnavailable": "10%"}},
		},
	})
	checkGolden(t, "cdplane-nvidia-values.yaml", toYAML(t, ms))
}

// TestControllerReplicas: two replicas with leader election by default, spread over nodes and
// kept through voluntary disruptions; one without leader election; an explicit count as given,
// more than one without leader election refused.
func TestControllerReplicas(t *testing.T) {
	replicas := func(ms []Manifest) (int64, bool, bool) {
		t.Helper()
		dep := object(t, ms, "Deployment")
		v, _, _ := unstructured.NestedFieldNoCopy(dep, "spec", "replicas")
		n, _ := strconv.ParseInt(fmt.Sprint(v), 10, 64)
		_, spread, _ := unstructured.NestedMap(dep, "spec", "template", "spec", "affinity", "podAntiAffinity")
		pdb := false
		for _, m := range ms {
			pdb = pdb || m.Object.GetKind() == "PodDisruptionBudget"
		}
		return n, spread, pdb
	}
	for name, tc := range map[string]struct {
		vals        map[string]any
		n           int64
		spread, pdb bool
	}{
		"default":                  {vals: nil, n: 2, spread: true, pdb: true},
		"leader election off":      {vals: map[string]any{"controller": map[string]any{"leaderElection": map[string]any{"enabled": false}}}, n: 1},
		"explicit one":             {vals: map[string]any{"controller": map[string]any{"replicas": 1}}, n: 1},
		"explicit three":           {vals: map[string]any{"controller": map[string]any{"replicas": 3}}, n: 3, spread: true, pdb: true},
		"affinity given, not ours": {vals: map[string]any{"controller": map[string]any{"affinity": map[string]any{"nodeAffinity": map[string]any{}}}}, n: 2, pdb: true},
	} {
		n, spread, pdb := replicas(renderPlane(t, "plane-a", tc.vals))
		if n != tc.n || spread != tc.spread || pdb != tc.pdb {
			t.Errorf("%s: %d replicas, anti-affinity %v, PodDisruptionBudget %v; want %d, %v, %v", name, n, spread, pdb, tc.n, tc.spread, tc.pdb)
		}
	}
	_, err := Render(Plane, "plane-a-cdplane", "plane-a-cdplane", testutil.WithImage(map[string]any{"controlPlaneID": "plane-a",
		"controller": map[string]any{"replicas": 2, "leaderElection": map[string]any{"enabled": false}}}))
	if err == nil || !strings.Contains(err.Error(), "leaderElection.enabled=false") {
		t.Errorf("two replicas without leader election: %v, want refused", err)
	}
}

func TestDaemonUpdateStrategy(t *testing.T) {
	for strategy, want := range map[string]string{"": "--daemon-update-strategy=OnDelete", "RollingUpdate": "--daemon-update-strategy=RollingUpdate"} {
		var vals map[string]any
		if strategy != "" {
			vals = map[string]any{"controller": map[string]any{"daemonUpdateStrategy": strategy}}
		}
		if got := args(t, renderPlane(t, "plane-a", vals), "Deployment"); !slices.Contains(got, want) {
			t.Errorf("daemonUpdateStrategy %q: controller args %q lack %s", strategy, got, want)
		}
	}
	if _, err := Render(Plane, "x", "plane-a-cdplane", testutil.WithImage(map[string]any{"controlPlaneID": "plane-a", "controller": map[string]any{"daemonUpdateStrategy": "Recreate"}})); err == nil {
		t.Error("daemonUpdateStrategy Recreate: rendered, want refused by the schema")
	}
}

// TestDaemonMetrics: the daemons' metrics port reaches the controller (on by default); off is an
// explicit 0; IMEX's ports and non-ports are refused by the schema.
func TestDaemonMetrics(t *testing.T) {
	for name, tc := range map[string]struct {
		metrics map[string]any
		want    string
	}{
		"default":  {want: "--daemon-metrics-port=8082"},
		"moved":    {metrics: map[string]any{"port": 9100}, want: "--daemon-metrics-port=9100"},
		"disabled": {metrics: map[string]any{"enabled": false}, want: "--daemon-metrics-port=0"},
	} {
		var vals map[string]any
		if tc.metrics != nil {
			vals = map[string]any{"daemon": map[string]any{"metrics": tc.metrics}}
		}
		if got := args(t, renderPlane(t, "plane-a", vals), "Deployment"); !slices.Contains(got, tc.want) {
			t.Errorf("%s: controller args %q lack %s", name, got, tc.want)
		}
	}
	for _, port := range []any{50000, 50005, 0, 70000, "8082"} {
		if _, err := Render(Plane, "x", "plane-a-cdplane", testutil.WithImage(map[string]any{"controlPlaneID": "plane-a", "daemon": map[string]any{"metrics": map[string]any{"port": port}}})); err == nil {
			t.Errorf("daemon.metrics.port %v: rendered, want refused by the schema", port)
		}
	}
}

// TestDaemonNetworkPolicy: the daemons' NetworkPolicy selects the pods the controller gives a
// domain (managed by cdplane, labelled with the domain), and neither the controller's nor the
// kubelet plugin's pods; IMEX's ports are open only to those daemon pods, the metrics port to
// all. Off with the value, and where IMEX is the host's (no daemons).
func TestDaemonNetworkPolicy(t *testing.T) {
	ms := renderPlane(t, "plane-a", nil)
	np := object(t, ms, "NetworkPolicy")
	var spec networkingv1.NetworkPolicySpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(np["spec"].(map[string]any), &spec); err != nil {
		t.Fatal(err)
	}
	selects := func(sel metav1.LabelSelector, l map[string]string) bool {
		s, err := metav1.LabelSelectorAsSelector(&sel)
		if err != nil {
			t.Fatal(err)
		}
		return s.Matches(labels.Set(l))
	}
	daemon := map[string]string{"app.kubernetes.io/managed-by": "cdplane", "resource.nvidia.com/computeDomain": "5f0c2a7e-8b1d-4c3e-9a26-0d7e4b9f1c38",
		planeLabel: "plane-a"}
	if !selects(spec.PodSelector, daemon) {
		t.Errorf("the policy does not select a daemon pod (%v)", daemon)
	}
	for _, kind := range []string{"Deployment", "DaemonSet"} {
		podLabels, _, _ := unstructured.NestedStringMap(object(t, ms, kind), "spec", "template", "metadata", "labels")
		if selects(spec.PodSelector, podLabels) {
			t.Errorf("the policy selects the %s's pods (%v)", kind, podLabels)
		}
	}
	if len(spec.Ingress) != 2 || len(spec.Ingress[0].From) != 1 || !selects(*spec.Ingress[0].From[0].PodSelector, daemon) ||
		len(spec.Ingress[0].Ports) != 2 || spec.Ingress[0].Ports[0].Port.IntValue() != 50000 || spec.Ingress[0].Ports[1].Port.IntValue() != 50005 ||
		len(spec.Ingress[1].From) != 0 || spec.Ingress[1].Ports[0].Port.IntValue() != 8082 {
		t.Errorf("ingress rules: %+v", spec.Ingress)
	}
	for name, values := range map[string]map[string]any{
		"turned off":   {"daemon": map[string]any{"networkPolicy": map[string]any{"enabled": false}}},
		"host-managed": {"imex": map[string]any{"mode": "hostManaged", "hostSocketPath": "/run/imex/ctl.sock"}, "featureGates": map[string]any{"HostManagedIMEXDaemon": true}},
	} {
		for _, m := range renderPlane(t, "plane-a", values) {
			if m.Object.GetKind() == "NetworkPolicy" {
				t.Errorf("%s: a NetworkPolicy is rendered", name)
			}
		}
	}
}

// TestPlaneWithoutImageIsRefused: the plane chart has no default image (no public registry
// serves one): rendering it without image.repository fails with the sentence that says what to
// set, before anything is installed.
func TestPlaneWithoutImageIsRefused(t *testing.T) {
	for _, vals := range []map[string]any{
		{"controlPlaneID": "plane-a"},
		{"controlPlaneID": "plane-a", "image": map[string]any{"repository": "", "tag": "1.0.0"}},
	} {
		_, err := Render(Plane, "x", "plane-a-cdplane", vals)
		if err == nil || !strings.Contains(err.Error(), "image.repository is not set: set it to the registry and repository the cdplane image was pushed to") {
			t.Errorf("values %v: error %v, want the refusal naming image.repository", vals, err)
		}
	}
}
