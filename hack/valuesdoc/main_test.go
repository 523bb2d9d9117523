package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const root = "../.."

// TestValuesDocIsUpToDate fails when docs/values.md is not what the generator writes.
func TestValuesDocIsUpToDate(t *testing.T) {
	want, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, outPath))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is out of date; run 'go run ./hack/valuesdoc' and commit the result", outPath)
	}
}

// TestEverySchemaLeafHasADescription fails when a leaf property of either chart's schema has
// no description.
func TestEverySchemaLeafHasADescription(t *testing.T) {
	for _, chart := range charts {
		missing, err := Undescribed(filepath.Join(root, "deployments", "helm", chart))
		if err != nil {
			t.Fatal(err)
		}
		if len(missing) > 0 {
			t.Errorf("%s/values.schema.json: no description for %s", chart, strings.Join(missing, ", "))
		}
	}
}

// TestEveryValueHasARow checks the table holds every leaf of values.yaml with its default.
func TestEveryValueHasARow(t *testing.T) {
	for _, chart := range charts {
		rows, err := ChartRows(filepath.Join(root, "deployments", "helm", chart))
		if err != nil {
			t.Fatal(err)
		}
		byKey := map[string]Row{}
		for _, r := range rows {
			if _, dup := byKey[r.Key]; dup {
				t.Errorf("%s: %s listed twice", chart, r.Key)
			}
			byKey[r.Key] = r
			if r.Description == "" || r.Type == "" {
				t.Errorf("%s: %s has no description or no type: %+v", chart, r.Key, r)
			}
		}
		for _, k := range []string{"image.repository", "controller.replicas", "controller.affinity", "kubeletPlugin.startupProbe.periodSeconds", "adminGroups"} {
			if _, ok := byKey[k]; !ok && (chart == "cdplane") == (k != "adminGroups") {
				t.Errorf("%s: no row for %s", chart, k)
			}
		}
	}
}

func TestRowsOfASmallChart(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("values.schema.json", `{
  "properties": {
    "a": {"description": "A | pipe.", "type": "integer"},
    "m": {"type": "object"},
    "p": {"$ref": "#/$defs/probe", "description": "The probe."},
    "e": {"description": "One of.", "enum": ["X", "Y"]},
    "s": {"description": "Not in values.", "type": ["integer", "null"]}
  },
  "$defs": {"probe": {"type": "object", "properties": {"period": {"description": "Seconds.", "type": "integer"}}}}
}`)
	write("values.yaml", `# About b.
b: ""
a: 1
# About m,
# two lines.
m:
  x: z
list:
  # not a key of the chart
  - key: v
p:
  period: 5
e: X
`)
	rows, err := ChartRows(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{
		{"b", "string", "`\"\"`", "About b."},
		{"a", "integer", "`1`", "A | pipe."},
		{"m", "object", "`{\"x\":\"z\"}`", "About m, two lines."},
		{"list", "array", "`[{\"key\":\"v\"}]`", ""},
		{"p.period", "integer", "`5`", "The probe. Seconds."},
		{"e", "`X`, `Y`", "`X`", "One of."},
		{"s", "integer or null", "*unset*", "Not in values."},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows %+v, want %+v", rows, want)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d: %+v, want %+v", i, rows[i], want[i])
		}
	}
	missing, err := Undescribed(dir)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(missing, ",") != "m" {
		t.Errorf("undescribed %v, want [m]", missing)
	}
}

// TestExamplesParse checks every YAML document under examples/ parses and names its kind.
func TestExamplesParse(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(root, "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(data), "\n---") {
			var obj map[string]any
			if err := yaml.UnmarshalStrict([]byte(doc), &obj); err != nil {
				t.Errorf("%s, document %d: %v", f, i, err)
				continue
			}
			if obj == nil {
				continue
			}
			if obj["apiVersion"] == nil || obj["kind"] == nil {
				t.Errorf("%s, document %d: no apiVersion or kind", f, i)
			}
		}
	}
}
