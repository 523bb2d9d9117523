package charts

import (
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"cdplane/internal/testutil"
)

// legacyMirrorNamespaceRule renders the legacy plane with the Secret mirror on and
// namespaceSelector sel, and returns the controller-scope policy's validation that holds the
// mirror's creates and updates to that selector's namespaces, compiled.
func legacyMirrorNamespaceRule(t *testing.T, sel string) cel.Program {
	t.Helper()
	ms := renderPlane(t, "", map[string]any{"secretMirror": map[string]any{"selector": "mirror=yes", "namespaceSelector": sel}})
	var expr string
	for _, m := range ms {
		if m.Object.GetKind() != "ValidatingAdmissionPolicy" || !strings.HasSuffix(m.Object.GetName(), "controller-scope") {
			continue
		}
		vs, _, _ := unstructured.NestedSlice(m.Object.Object, "spec", "validations")
		for _, v := range vs {
			if e, _ := v.(map[string]any)["expression"].(string); strings.Contains(e, "namespaceObject") && strings.Contains(e, "isSecret") {
				expr = e
			}
		}
	}
	if expr == "" {
		t.Fatalf("selector %q: no namespace-selector validation in the controller-scope policy", sel)
	}
	env, err := cel.NewEnv(cel.OptionalTypes(),
		cel.Variable("variables", cel.DynType), cel.Variable("request", cel.DynType), cel.Variable("namespaceObject", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		t.Fatalf("selector %q renders an expression that does not compile: %v\n%s", sel, iss.Err(), expr)
	}
	prg, err := env.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	return prg
}

// TestMirrorNamespaceSelectorInPolicy: the legacy plane's namespace selector, rendered into its
// controller's admission policy as CEL, admits a Secret write in exactly the namespaces the
// controller's own parser (labels.Parse) selects: the policy never says less, or more, than the
// mirror does.
func TestMirrorNamespaceSelectorInPolicy(t *testing.T) {
	namespaces := []map[string]string{
		{},
		{"team": "a"},
		{"team": "b"},
		{"team": "a", "env": "x"},
		{"team": "a", "env": "z", "blocked": ""},
		{"team": "", "tier": "low"},
		{"tier": "high", "zone": "z1"},
		{"example.com/tenant": "t-1", "zone": "z2"},
	}
	for _, sel := range []string{
		"team=a",
		"team==a",
		"team!=a",
		"team",
		"!team",
		"team in (a, b)",
		"team notin (a)",
		"team=a,env in (x,y),!blocked",
		"tier!=low, zone notin (z1, z3), example.com/tenant",
		"team=",
	} {
		parsed, err := labels.Parse(sel)
		if err != nil {
			t.Fatalf("%q: %v", sel, err)
		}
		prg := legacyMirrorNamespaceRule(t, sel)
		for _, ns := range namespaces {
			out, _, err := prg.Eval(map[string]any{
				"variables":       map[string]any{"isSecret": true},
				"request":         map[string]any{"operation": "CREATE"},
				"namespaceObject": map[string]any{"metadata": map[string]any{"labels": ns}},
			})
			if err != nil {
				t.Fatalf("selector %q, labels %v: %v", sel, ns, err)
			}
			if got, want := out.Value() == true, parsed.Matches(labels.Set(ns)); got != want {
				t.Errorf("selector %q, namespace labels %v: policy admits %t, the mirror selects %t", sel, ns, got, want)
			}
		}
	}
}

// TestMirrorNamespaceSelectorRefusedWhenNotRenderable: a selector the policy cannot express is
// refused at render time, naming the requirement, rather than rendered weaker.
func TestMirrorNamespaceSelectorRefusedWhenNotRenderable(t *testing.T) {
	_, err := Render(Plane, "cdplane", "cdplane", testutil.WithImage(map[string]any{"secretMirror": map[string]any{"selector": "mirror=yes", "namespaceSelector": "team=a,size>3"}}))
	if err == nil || !strings.Contains(err.Error(), `"size>3"`) {
		t.Fatalf("err = %v, want a refusal naming the requirement size>3", err)
	}
}
