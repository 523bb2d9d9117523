package v1beta1_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	cdv1beta1 "cdplane/api/v1beta1"
)

func sampleDomain() *cdv1beta1.ComputeDomain {
	return &cdv1beta1.ComputeDomain{
		ObjectMeta: metav1.ObjectMeta{Name: "cd", Namespace: "ns", Labels: map[string]string{"a": "b"}},
		Spec: cdv1beta1.ComputeDomainSpec{
			NumNodes: 4,
			Channel: &cdv1beta1.ComputeDomainChannelSpec{
				ResourceClaimTemplate: cdv1beta1.ComputeDomainResourceClaimTemplate{Name: "cd-channel"},
				AllocationMode:        cdv1beta1.AllocationModeAll,
			},
		},
		Status: cdv1beta1.ComputeDomainStatus{
			Status:     cdv1beta1.StatusReady,
			Nodes:      []cdv1beta1.ComputeDomainNode{{Name: "n1", IPAddress: "127.0.0.2", CliqueID: "c.1", Index: 0, Status: "Ready"}},
			Cliques:    []cdv1beta1.ComputeDomainCliqueSummary{{ID: "c.1", Ready: 1, Total: 1}},
			Conditions: []metav1.Condition{{Type: cdv1beta1.ConditionReady, Status: metav1.ConditionTrue, Reason: "R"}},
		},
	}
}

func TestDeepCopyRoundTrip(t *testing.T) {
	orig := sampleDomain()
	cp := orig.DeepCopy()
	if diff := cmp.Diff(orig, cp); diff != "" {
		t.Fatalf("deep copy differs (-orig +copy):\n%s", diff)
	}
	// Mutating the copy must not reach the original.
	cp.Spec.Channel.AllocationMode = cdv1beta1.AllocationModeSingle
	cp.Status.Nodes[0].Index = 7
	cp.Status.Conditions[0].Reason = "Other"
	cp.Labels["a"] = "c"
	if orig.Spec.Channel.AllocationMode != cdv1beta1.AllocationModeAll || orig.Status.Nodes[0].Index != 0 ||
		orig.Status.Conditions[0].Reason != "R" || orig.Labels["a"] != "b" {
		t.Fatalf("deep copy shares memory with the original: %+v", orig)
	}

	clique := &cdv1beta1.ComputeDomainClique{
		ObjectMeta: metav1.ObjectMeta{Name: "uid.c.1", Namespace: "driver"},
		Daemons:    []cdv1beta1.ComputeDomainDaemonInfo{{NodeName: "n1", IPAddress: "127.0.0.2", CliqueID: "c.1", Index: 3}},
	}
	ccp := clique.DeepCopy()
	ccp.Daemons[0].Index = 4
	if clique.Daemons[0].Index != 3 {
		t.Fatal("clique deep copy shares its daemons with the original")
	}
}

func TestJSONFieldNames(t *testing.T) {
	// The JSON shape is the original API's: existing manifests and readers depend on it.
	data, err := json.Marshal(sampleDomain())
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	spec := got["spec"].(map[string]any)
	channel := spec["channel"].(map[string]any)
	node := got["status"].(map[string]any)["nodes"].([]any)[0].(map[string]any)
	checks := map[string]struct {
		got, want any
	}{
		"spec.numNodes":                              {spec["numNodes"], float64(4)},
		"spec.channel.allocationMode":                {channel["allocationMode"], "All"},
		"spec.channel.resourceClaimTemplate.name":    {channel["resourceClaimTemplate"].(map[string]any)["name"], "cd-channel"},
		"status.status":                              {got["status"].(map[string]any)["status"], "Ready"},
		"status.nodes[0].name":                       {node["name"], "n1"},
		"status.nodes[0].ipAddress":                  {node["ipAddress"], "127.0.0.2"},
		"status.nodes[0].cliqueID":                   {node["cliqueID"], "c.1"},
		"status.nodes[0].index (0 is still written)": {node["index"], float64(0)},
		"status.nodes[0].status":                     {node["status"], "Ready"},
	}
	for name, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", name, c.got, c.want)
		}
	}

	cfg, err := json.Marshal(cdv1beta1.NewChannelConfig("uid-1", "All"))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"kind":"ComputeDomainChannelConfig","apiVersion":"resource.nvidia.com/v1beta1","domainID":"uid-1","allocationMode":"All"}`
	if string(cfg) != want {
		t.Errorf("channel config JSON = %s, want %s", cfg, want)
	}
}

// TestCRDSchema checks the generated CRDs carry the defaults and limits the API promises; the
// apiserver enforces them (see test/integration/api).
func TestCRDSchema(t *testing.T) {
	cd := loadCRD(t, "resource.nvidia.com_computedomains.yaml")
	v := cd.Spec.Versions[0]
	if v.Subresources == nil || v.Subresources.Status == nil {
		t.Error("ComputeDomain has no status subresource")
	}
	spec := v.Schema.OpenAPIV3Schema.Properties["spec"]
	numNodes := spec.Properties["numNodes"]
	mode := spec.Properties["channel"].Properties["allocationMode"]
	status := v.Schema.OpenAPIV3Schema.Properties["status"]
	nodes := status.Properties["nodes"]

	clique := loadCRD(t, "resource.nvidia.com_computedomaincliques.yaml")
	daemons := clique.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["daemons"]

	checks := map[string]struct{ got, want string }{
		"numNodes default":         {string(numNodes.Default.Raw), "0"},
		"numNodes minimum":         {fmtFloat(numNodes.Minimum), "0"},
		"allocationMode default":   {string(mode.Default.Raw), `"Single"`},
		"allocationMode enum":      {enumString(mode.Enum), `"Single","All"`},
		"spec immutable rule":      {spec.XValidations[0].Rule, "self == oldSelf"},
		"status.nodes list type":   {*nodes.XListType, "atomic"},
		"status.nodes map keys":    {strings.Join(nodes.XListMapKeys, ","), ""},
		"status.nodes max items":   {fmtInt(nodes.MaxItems), "4096"},
		"daemons list type":        {*daemons.XListType, "atomic"},
		"daemons map keys":         {strings.Join(daemons.XListMapKeys, ","), ""},
		"daemons max items":        {fmtInt(daemons.MaxItems), "256"},
		"daemon index optional":    {boolString(contains(daemons.Items.Schema.Required, "index")), "false"},
		"node index optional":      {boolString(contains(nodes.Items.Schema.Required, "index")), "false"},
		"printer column 2 (Ready)": {v.AdditionalPrinterColumns[1].JSONPath, ".status.readyNodes"},
	}
	for name, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %s, want %s", name, c.got, c.want)
		}
	}
	// Every string in both schemas carries a length limit or an enum.
	for _, crd := range []*apiextensionsv1.CustomResourceDefinition{cd, clique} {
		walkStrings(t, crd.Name, "", crd.Spec.Versions[0].Schema.OpenAPIV3Schema)
	}
}

func walkStrings(t *testing.T, crd, path string, s *apiextensionsv1.JSONSchemaProps) {
	t.Helper()
	if s.Type == "string" && s.MaxLength == nil && len(s.Enum) == 0 && s.Format != "date-time" &&
		path != ".apiVersion" && path != ".kind" {
		t.Errorf("%s: string %s has no length limit", crd, path)
	}
	for name, p := range s.Properties {
		if path == "" && name == "metadata" {
			continue
		}
		walkStrings(t, crd, path+"."+name, &p)
	}
	if s.Items != nil && s.Items.Schema != nil {
		walkStrings(t, crd, path+"[]", s.Items.Schema)
	}
}

func loadCRD(t *testing.T, file string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deployments", "helm", "cdplane-prerequisites", "templates", "crds", file))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		t.Fatal(err)
	}
	return crd
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func enumString(e []apiextensionsv1.JSON) string {
	out := ""
	for i, v := range e {
		if i > 0 {
			out += ","
		}
		out += string(v.Raw)
	}
	return out
}

func fmtFloat(f *float64) string {
	if f == nil {
		return "<nil>"
	}
	return string(mustJSON(*f))
}

func fmtInt(i *int64) string {
	if i == nil {
		return "<nil>"
	}
	return string(mustJSON(*i))
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
