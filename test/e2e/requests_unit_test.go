package e2e

import (
	"strings"
	"testing"
)

func TestParseDomainRequests(t *testing.T) {
	raw := strings.Join([]string{
		`# HELP apiserver_request_total [STABLE] Counter of apiserver requests.`,
		`# TYPE apiserver_request_total counter`,
		`apiserver_request_total{code="200",component="apiserver",dry_run="",group="resource.nvidia.com",resource="computedomains",scope="resource",subresource="status",verb="APPLY",version="v1beta1"} 7`,
		`apiserver_request_total{code="201",component="apiserver",dry_run="",group="resource.nvidia.com",resource="computedomaincliques",scope="resource",subresource="",verb="POST",version="v1beta1"} 2`,
		`apiserver_request_total{code="409",component="apiserver",dry_run="",group="resource.nvidia.com",resource="computedomains",scope="resource",subresource="status",verb="PATCH",version="v1beta1"} 3`,
		`apiserver_request_total{code="200",component="apiserver",dry_run="",group="resource.nvidia.com",resource="computedomains",scope="namespace",subresource="",verb="LIST",version="v1beta1"} 40`,
		`apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="secrets",scope="resource",subresource="",verb="PUT",version="v1"} 5`,
		`apiserver_request_total{code="200",component="apiserver",dry_run="",group="resource.nvidia.com",resource="computedomains",scope="resource",subresource="",verb="PUT",version="v1beta1"} 1.5e+01`,
		`apiserver_request_duration_seconds_count{code="409",group="resource.nvidia.com",verb="PATCH"} 99`,
	}, "\n")
	got, err := parseDomainRequests([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	want := requestCounts{writes: 7 + 2 + 15, conflicts: 3, series: 6}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if d := want.since(requestCounts{writes: 4, conflicts: 1}); d.writes != 20 || d.conflicts != 2 {
		t.Errorf("since: %+v", d)
	}

	// A format the parser no longer understands is an error, never zero conflicts.
	for name, bad := range map[string]string{
		"no series":       `apiserver_request_duration_seconds_count{code="409"} 1`,
		"unquoted label":  `apiserver_request_total{code=409,group="resource.nvidia.com"} 1`,
		"no value":        `apiserver_request_total{code="409",group="resource.nvidia.com"}`,
		"no code label":   `apiserver_request_total{group="resource.nvidia.com",verb="PATCH"} 1`,
		"unclosed labels": `apiserver_request_total{code="409",group="resource.nvidia.com" 1`,
	} {
		if c, err := parseDomainRequests([]byte(bad)); err == nil {
			t.Errorf("%s: parsed as %+v, want an error", name, c)
		}
	}
}
