package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// requestCounts is what the apiserver's apiserver_request_total says of the requests on
// ComputeDomains and their cliques (any subresource).
type requestCounts struct {
	writes    int // create, update, patch, apply or delete answered 2xx
	conflicts int // any request answered 409
	series    int // the series read: none means the metric is not where it was
}

func (r requestCounts) since(before requestCounts) requestCounts {
	return requestCounts{writes: r.writes - before.writes, conflicts: r.conflicts - before.conflicts, series: r.series}
}

// domainRequests reads the apiserver's request counts on ComputeDomains and their cliques.
func domainRequests(t *testing.T) requestCounts {
	t.Helper()
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx())
	must(t, err)
	counts, err := parseDomainRequests(raw)
	must(t, err)
	return counts
}

// parseDomainRequests reads apiserver_request_total from a Prometheus text exposition. A
// series it cannot read, or no series at all, is an error: a scenario that asserts no
// conflicts must not pass because the format moved.
func parseDomainRequests(raw []byte) (requestCounts, error) {
	const metric = "apiserver_request_total{"
	var out requestCounts
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric) {
			continue
		}
		labels, value, err := parseSeries(line[len(metric):])
		if err != nil {
			return requestCounts{}, fmt.Errorf("%q: %w", line, err)
		}
		out.series++
		if labels["group"] != "resource.nvidia.com" {
			continue
		}
		code, ok := labels["code"]
		if !ok {
			return requestCounts{}, fmt.Errorf("%q: no code label", line)
		}
		switch {
		case code == "409":
			out.conflicts += int(value)
		case strings.HasPrefix(code, "2") && isWrite(labels["verb"]):
			out.writes += int(value)
		}
	}
	if err := sc.Err(); err != nil {
		return requestCounts{}, err
	}
	if out.series == 0 {
		return requestCounts{}, fmt.Errorf("no apiserver_request_total series in the apiserver's metrics")
	}
	return out, nil
}

func isWrite(verb string) bool {
	switch verb {
	case "POST", "PUT", "PATCH", "APPLY", "DELETE":
		return true
	}
	return false
}

// parseSeries reads `name="value",...} number` (what follows the metric's opening brace).
func parseSeries(s string) (map[string]string, float64, error) {
	labels := map[string]string{}
	for {
		if rest, ok := strings.CutPrefix(s, "}"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return nil, 0, fmt.Errorf("no value")
			}
			v, err := strconv.ParseFloat(f[0], 64)
			return labels, v, err
		}
		name, rest, ok := strings.Cut(s, "=")
		if !ok || name == "" {
			return nil, 0, fmt.Errorf("unclosed labels")
		}
		if !strings.HasPrefix(rest, `"`) {
			return nil, 0, fmt.Errorf("label %s: value not quoted", name)
		}
		value, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return nil, 0, fmt.Errorf("label %s: %w", name, err)
		}
		labels[name], _ = strconv.Unquote(value)
		s = strings.TrimPrefix(rest[len(value):], ",")
	}
}
