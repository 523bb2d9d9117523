package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"cdplane/internal/status"
)

var docTime = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func testPlanes() status.Planes {
	return status.Planes{ObservedAt: docTime, Planes: []status.Plane{
		{Legacy: true, Installed: true, DriverNamespace: "cdplane", Domains: status.DomainCounts{Ready: 1}},
		{ID: "plane-a", Installed: true, DriverNamespace: "plane-a-cdplane", Nodes: 18},
	}}
}

func testDomains() status.Domains {
	return status.Domains{ObservedAt: docTime, Domains: []status.DomainSummary{
		{Namespace: "team-a", Name: "train", Status: "Ready", NumNodes: 2, ReadyNodes: 2, Cliques: 1},
		{Namespace: "team-b", Name: "eval", NumNodes: 4},
	}}
}

// printOut prints doc as -o format does in status, bench and version.
func printOut(t *testing.T, format string, names bool, doc *document, objs []runtime.Object) string {
	t.Helper()
	o := outputFlags{format: format, names: names}
	p, err := o.printer()
	if err != nil {
		t.Fatalf("-o %s: %v", format, err)
	}
	var b bytes.Buffer
	if err := printDocument(&b, p, doc, objs); err != nil {
		t.Fatalf("-o %s: %v", format, err)
	}
	return b.String()
}

// TestOutputFormats: each -o format on a real document. The JSON keeps every field of the
// document it wraps, under the same name, with apiVersion and kind added first.
func TestOutputFormats(t *testing.T) {
	planes := testPlanes()
	planeNames := []runtime.Object{planeName(planes.Planes[0]), planeName(planes.Planes[1])}
	doc := newDocument(kindPlaneStatusList, planes)

	t.Run("json", func(t *testing.T) {
		out := printOut(t, "json", true, doc, planeNames)
		if !strings.HasPrefix(out, "{\n    \"apiVersion\": \"status.cdplane.io/v1\",\n    \"kind\": \"PlaneStatusList\",\n    \"observedAt\"") {
			t.Errorf("-o json starts %q, want apiVersion, kind, then the document's fields", out[:min(len(out), 120)])
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		plain, err := json.Marshal(planes)
		if err != nil {
			t.Fatal(err)
		}
		var want map[string]any
		if err := json.Unmarshal(plain, &want); err != nil {
			t.Fatal(err)
		}
		want["apiVersion"], want["kind"] = documentAPIVersion, kindPlaneStatusList
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("-o json is not the document's JSON with apiVersion and kind (-want +got):\n%s", diff)
		}
	})
	t.Run("yaml", func(t *testing.T) {
		out := printOut(t, "yaml", true, doc, planeNames)
		var got status.Planes
		if err := yaml.UnmarshalStrict([]byte(strings.Replace(strings.Replace(out, "apiVersion: status.cdplane.io/v1\n", "", 1), "kind: PlaneStatusList\n", "", 1)), &got); err != nil {
			t.Fatalf("-o yaml: %v\n%s", err, out)
		}
		if diff := cmp.Diff(planes, got); diff != "" || !strings.Contains(out, "kind: PlaneStatusList\n") {
			t.Errorf("-o yaml does not read back as the document (-want +got):\n%s\n%s", diff, out)
		}
	})
	t.Run("jsonpath", func(t *testing.T) {
		if out := printOut(t, "jsonpath={.planes[*].id}", true, doc, planeNames); out != " plane-a" {
			t.Errorf("-o jsonpath={.planes[*].id} = %q, want the legacy plane's empty id, then plane-a", out)
		}
		if out := printOut(t, "jsonpath={.kind}", true, doc, planeNames); out != kindPlaneStatusList {
			t.Errorf("-o jsonpath={.kind} = %q", out)
		}
	})
	t.Run("jsonpath-file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "tmpl")
		if err := os.WriteFile(path, []byte(`{range .domains[*]}{.namespace}/{.name} {.readyNodes}/{.numNodes}{"\n"}{end}`), 0o600); err != nil {
			t.Fatal(err)
		}
		out := printOut(t, "jsonpath-file="+path, true, newDocument(kindDomainStatusList, testDomains()), nil)
		if want := "team-a/train 2/2\nteam-b/eval 0/4\n"; out != want {
			t.Errorf("-o jsonpath-file = %q, want %q", out, want)
		}
	})
	t.Run("name", func(t *testing.T) {
		if out, want := printOut(t, "name", true, doc, planeNames), "plane/(legacy)\nplane/plane-a\n"; out != want {
			t.Errorf("-o name of planes = %q, want %q", out, want)
		}
		d := testDomains()
		names := []runtime.Object{domainName(d.Domains[0].Namespace, d.Domains[0].Name), domainName(d.Domains[1].Namespace, d.Domains[1].Name)}
		if out, want := printOut(t, "name", true, newDocument(kindDomainStatusList, d), names), "computedomain.resource.nvidia.com/train\ncomputedomain.resource.nvidia.com/eval\n"; out != want {
			t.Errorf("-o name of domains = %q, want %q", out, want)
		}
	})
}

func TestOutputFlagsRefuse(t *testing.T) {
	cases := map[string]struct {
		format string
		names  bool
		want   string
	}{
		"unknown":            {format: "wide", want: `--output "wide": want one of text, json, yaml, jsonpath=TEMPLATE, jsonpath-file=FILE`},
		"name where none":    {format: "name", want: `--output "name": want one of text, json, yaml, jsonpath`},
		"an empty template":  {format: "jsonpath=", names: true, want: `--output "jsonpath="`},
		"a bad template":     {format: "jsonpath={.planes[", names: true, want: `--output "jsonpath={.planes["`},
		"a missing file":     {format: "jsonpath-file=/nonexistent/t", names: true, want: `--output "jsonpath-file=/nonexistent/t"`},
		"json with an value": {format: "json=x", names: true, want: `--output "json=x"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := outputFlags{format: tc.format, names: tc.names}
			if _, err := o.printer(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("-o %s: %v, want %q", tc.format, err, tc.want)
			}
		})
	}
	for _, text := range []string{"", "text"} {
		if p, err := (&outputFlags{format: text}).printer(); p != nil || err != nil {
			t.Errorf("-o %q: %v, %v; want the text (no printer)", text, p, err)
		}
	}
}

// TestVersionOutput: version -o json is a Version document with the fields version -o json
// always had.
func TestVersionOutput(t *testing.T) {
	code, stdout, stderr := run(t, "", "version", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"version", "commit", "goVersion", "platform"} {
		if got[k] == "" {
			t.Errorf("version -o json lacks %s: %s", k, stdout)
		}
	}
	if got["kind"] != kindVersion || got["apiVersion"] != documentAPIVersion {
		t.Errorf("version -o json: kind %q apiVersion %q", got["kind"], got["apiVersion"])
	}
	if code, stdout, _ := run(t, "", "version", "-o", "jsonpath={.kind}"); code != 0 || stdout != kindVersion {
		t.Errorf("version -o jsonpath={.kind}: exit %d, %q", code, stdout)
	}
}
