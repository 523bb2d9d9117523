package promtext

import "testing"

func TestSum(t *testing.T) {
	text := `# HELP apiserver_request_total x
# TYPE apiserver_request_total counter
apiserver_request_total{code="409",group="resource.nvidia.com",verb="PUT"} 3
apiserver_request_total{code="409",group="",verb="PATCH"} 2
apiserver_request_total{code="200",group="resource.nvidia.com",verb="PUT"} 40
apiserver_request_total_other{code="409"} 100
plain 7
`
	cases := map[string]struct {
		name  string
		match map[string]string
		want  float64
	}{
		"all 409s":       {"apiserver_request_total", map[string]string{"code": "409"}, 5},
		"409s of group":  {"apiserver_request_total", map[string]string{"code": "409", "group": "resource.nvidia.com"}, 3},
		"everything":     {"apiserver_request_total", nil, 45},
		"no labels":      {"plain", nil, 7},
		"missing metric": {"nope", nil, 0},
	}
	for name, tc := range cases {
		if got := Sum(text, tc.name, tc.match); got != tc.want {
			t.Errorf("%s: got %v, want %v", name, got, tc.want)
		}
	}
}
