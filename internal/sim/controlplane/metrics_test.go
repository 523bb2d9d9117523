package controlplane

import (
	"strings"
	"testing"
)

const exposition = `# HELP apiserver_request_total x
# TYPE apiserver_request_total counter
apiserver_request_total{code="409",group="resource.nvidia.com",verb="PUT"} 3
apiserver_request_total{code="409",group="",verb="PATCH"} 2
apiserver_request_total{code="200",group="resource.nvidia.com",verb="PUT"} 40
# TYPE apiserver_request_total_other counter
apiserver_request_total_other{code="409"} 100
# TYPE inflight gauge
inflight{kind="mutating"} 4
inflight{kind="readOnly"} 6
# TYPE latency histogram
latency_bucket{le="1"} 1
latency_bucket{le="+Inf"} 2
latency_sum 3
latency_count 2
plain 7
`

func TestMetricsSum(t *testing.T) {
	m, err := ParseMetrics(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		name  string
		match map[string]string
		want  float64
	}{
		"all 409s":                   {"apiserver_request_total", map[string]string{"code": "409"}, 5},
		"409s of group":              {"apiserver_request_total", map[string]string{"code": "409", "group": "resource.nvidia.com"}, 3},
		"409s of the core group":     {"apiserver_request_total", map[string]string{"code": "409", "group": ""}, 2},
		"everything":                 {"apiserver_request_total", nil, 45},
		"no sample matches":          {"apiserver_request_total", map[string]string{"code": "500"}, 0},
		"label no sample has":        {"apiserver_request_total", map[string]string{"resource": "pods"}, 0},
		"absent label matches empty": {"apiserver_request_total", map[string]string{"resource": ""}, 45},
		"gauge":                      {"inflight", nil, 10},
		"untyped, no labels":         {"plain", nil, 7},
		"histogram":                  {"latency", nil, 0},
		"missing metric":             {"nope", nil, 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := m.Sum(tc.name, tc.match); got != tc.want {
				t.Errorf("Sum(%s, %v) = %v, want %v", tc.name, tc.match, got, tc.want)
			}
		})
	}
}

func TestParseMetricsRejectsMalformedInput(t *testing.T) {
	for name, text := range map[string]string{
		"value missing":    "apiserver_request_total{code=\"409\"}\n",
		"unclosed labels":  "apiserver_request_total{code=\"409\" 3\n",
		"value not number": "plain seven\n",
	} {
		if _, err := ParseMetrics(strings.NewReader(text)); err == nil {
			t.Errorf("%s: parsed %q without an error", name, text)
		}
	}
}
