package charts

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/action"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"cdplane/internal/plane"
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
	ms, err := Render(Plane, ns, ns, values)
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
			_, err := Render(Plane, "x", plane.Name(tc.id, "cdplane"), map[string]any{"controlPlaneID": tc.id})
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
		if _, err := Render(Plane, "x", plane.Name(id, "cdplane"), map[string]any{"controlPlaneID": id}); err != nil {
			t.Errorf("render with valid controlPlaneID %q: %v", id, err)
		}
	}
}

// TestReleaseNamespaceIsTheDriverNamespace: the admission policies identify a plane's accounts
// by the driver namespace derived from its id, so the chart refuses any other namespace.
func TestReleaseNamespaceIsTheDriverNamespace(t *testing.T) {
	for id, ns := range map[string]string{"": "kube-system", "plane-a": "cdplane", "plane-b": "plane-a-cdplane"} {
		_, err := Render(Plane, "x", ns, map[string]any{"controlPlaneID": id})
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
	_, err := Render(Plane, "x", "plane-a-cdplane", map[string]any{"controlPlaneID": "plane-a", "imex": map[string]any{"mode": "hostManaged"}})
	if err == nil || !strings.Contains(err.Error(), "imex.mode=hostManaged requires featureGates.HostManagedIMEXDaemon=true") {
		t.Fatalf("hostManaged without the gate: %v, want a refusal naming the gate", err)
	}
	if _, err := Render(Plane, "x", "plane-a-cdplane", map[string]any{"controlPlaneID": "plane-a", "imex": map[string]any{"mode": "HostManaged"}}); err == nil {
		t.Fatal("an unknown imex.mode rendered")
	}
	ms := renderPlane(t, "plane-a", map[string]any{
		"featureGates": map[string]any{"HostManagedIMEXDaemon": true},
		"imex":         map[string]any{"mode": "hostManaged", "hostSocketPath": "/run/imex/ctl.sock"},
	})
	checkGolden(t, "cdplane-host-managed.yaml", toYAML(t, ms))
}
