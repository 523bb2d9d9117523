package charts

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/daemonenv"
	"cdplane/internal/metrics"
	"cdplane/internal/scheme"
	"cdplane/internal/testutil"
)

// monitoringOn turns on every monitoring object of the plane chart.
var monitoringOn = map[string]any{"monitoring": map[string]any{
	"podMonitor":       map[string]any{"enabled": true},
	"prometheusRule":   map[string]any{"enabled": true},
	"grafanaDashboard": map[string]any{"enabled": true},
}}

// monitoringObjects renders plane id with values and returns its monitoring objects.
func monitoringObjects(t *testing.T, id string, values map[string]any) []Manifest {
	t.Helper()
	var out []Manifest
	for _, m := range renderPlane(t, id, values) {
		if strings.Contains(m.Template, "/monitoring-") {
			out = append(out, m)
		}
	}
	return out
}

func TestMonitoringGolden(t *testing.T) {
	for name, id := range map[string]string{"legacy": "", "plane-a": "plane-a"} {
		t.Run(name, func(t *testing.T) {
			checkGolden(t, "cdplane-monitoring-"+name+".yaml", toYAML(t, monitoringObjects(t, id, monitoringOn)))
		})
	}
}

// TestMonitoringOffByDefault: the default render holds no monitoring object (their CRDs need not
// exist), and each switch turns on only its own.
func TestMonitoringOffByDefault(t *testing.T) {
	if ms := monitoringObjects(t, "plane-a", nil); len(ms) != 0 {
		t.Errorf("default render holds %d monitoring objects", len(ms))
	}
	for key, want := range map[string][]string{
		// The controllers' and plugins', and the daemons'.
		"podMonitor":       {"PodMonitor", "PodMonitor"},
		"prometheusRule":   {"PrometheusRule"},
		"grafanaDashboard": {"ConfigMap"},
	} {
		ms := monitoringObjects(t, "plane-a", map[string]any{"monitoring": map[string]any{key: map[string]any{"enabled": true}}})
		var kinds []string
		for _, m := range ms {
			kinds = append(kinds, m.Object.GetKind())
		}
		if !slices.Equal(kinds, want) {
			t.Errorf("monitoring.%s.enabled: objects %v, want %v", key, kinds, want)
		}
	}
}

// TestDaemonPodMonitor: the daemons' PodMonitor selects what the controller puts on daemon pods
// (the domain label, managed-by cdplane) in the driver namespace, at the port the controller
// names; none without daemon metrics, or without daemons (host-managed IMEX).
func TestDaemonPodMonitor(t *testing.T) {
	daemonMonitors := func(values map[string]any) []Manifest {
		var out []Manifest
		for _, m := range monitoringObjects(t, "plane-a", values) {
			if m.Object.GetKind() == "PodMonitor" && strings.HasSuffix(m.Object.GetName(), "-daemons") {
				out = append(out, m)
			}
		}
		return out
	}
	on := map[string]any{"monitoring": map[string]any{"podMonitor": map[string]any{"enabled": true}}}
	ms := daemonMonitors(on)
	if len(ms) != 1 {
		t.Fatalf("%d daemon PodMonitors, want 1", len(ms))
	}
	spec := ms[0].Object.Object["spec"].(map[string]any)
	sel, err := metav1.LabelSelectorAsSelector(toLabelSelector(t, spec["selector"]))
	if err != nil {
		t.Fatal(err)
	}
	pod := k8slabels.Set{cdv1beta1.ComputeDomainLabel: "uid", "app.kubernetes.io/managed-by": "cdplane", cdv1beta1.ControlPlaneLabel: "plane-a"}
	if !sel.Matches(pod) {
		t.Errorf("selector %s does not select a daemon pod %v", sel, pod)
	}
	if other := (k8slabels.Set{"app.kubernetes.io/name": "cdplane-kubelet-plugin", "app.kubernetes.io/managed-by": "Helm"}); sel.Matches(other) {
		t.Errorf("selector %s selects a plugin pod", sel)
	}
	if ns, _, _ := unstructured.NestedStringSlice(spec, "namespaceSelector", "matchNames"); !slices.Equal(ns, []string{"plane-a-cdplane"}) {
		t.Errorf("namespaces %v, want the driver namespace", ns)
	}
	if port, _, _ := unstructured.NestedString(spec["podMetricsEndpoints"].([]any)[0].(map[string]any), "port"); port != daemonenv.MetricsPortName {
		t.Errorf("port %q, want %q", port, daemonenv.MetricsPortName)
	}
	off := map[string]any{"monitoring": on["monitoring"], "daemon": map[string]any{"metrics": map[string]any{"enabled": false}}}
	if ms := daemonMonitors(off); len(ms) != 0 {
		t.Errorf("daemon.metrics.enabled=false: %d daemon PodMonitors, want none", len(ms))
	}
	host := map[string]any{"monitoring": on["monitoring"], "imex": map[string]any{"mode": "hostManaged"},
		"featureGates": map[string]any{"HostManagedIMEXDaemon": true}}
	if ms := daemonMonitors(host); len(ms) != 0 {
		t.Errorf("host-managed IMEX: %d daemon PodMonitors, want none", len(ms))
	}
}

func toLabelSelector(t *testing.T, v any) *metav1.LabelSelector {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	sel := &metav1.LabelSelector{}
	if err := json.Unmarshal(data, sel); err != nil {
		t.Fatal(err)
	}
	return sel
}

// TestMonitoringValues: thresholds, severities and labels come from the values; a threshold the
// rule expression cannot hold is refused.
func TestMonitoringValues(t *testing.T) {
	values := map[string]any{"monitoring": map[string]any{
		"prometheusRule": map[string]any{
			"enabled": true, "labels": map[string]any{"release": "prom"}, "additionalLabels": map[string]any{"team": "gpu"},
			"domainNotReady": map[string]any{"for": "2h", "severity": "page"},
			"noLeader":       map[string]any{"for": "1m30s"},
		},
		"grafanaDashboard": map[string]any{"enabled": true, "labels": map[string]any{"dash": "yes"}},
	}}
	ms := monitoringObjects(t, "plane-a", values)
	rules := alertRules(t, ms)
	if got := rules["CDPlaneComputeDomainNotReady"]; !strings.HasSuffix(got.Expr, "> 7200") || got.Labels["severity"] != "page" || got.Labels["team"] != "gpu" {
		t.Errorf("domainNotReady with for 2h, severity page: %+v", got)
	}
	if got := rules["CDPlaneControllerNoLeader"]; got.For != "1m30s" || got.Labels["team"] != "gpu" || got.Labels["control_plane_id"] != "plane-a" {
		t.Errorf("noLeader with for 1m30s: %+v", got)
	}
	for _, m := range ms {
		switch m.Object.GetKind() {
		case "PrometheusRule":
			if m.Object.GetLabels()["release"] != "prom" {
				t.Errorf("PrometheusRule labels %v, want release=prom", m.Object.GetLabels())
			}
		case "ConfigMap":
			if l := m.Object.GetLabels(); l["dash"] != "yes" || l["grafana_dashboard"] != "1" {
				t.Errorf("dashboard labels %v, want dash=yes and the default grafana_dashboard=1", l)
			}
		}
	}
	for _, bad := range []string{"1h30m", "90", "15min", "1d"} {
		_, err := Render(Plane, "cdplane", "cdplane", testutil.WithImage(map[string]any{"monitoring": map[string]any{
			"prometheusRule": map[string]any{"enabled": true, "domainNotReady": map[string]any{"for": bad}},
		}}))
		if err == nil || !strings.Contains(err.Error(), "domainNotReady") {
			t.Errorf("domainNotReady.for %q: %v, want a refusal naming it", bad, err)
		}
	}
}

type rule struct {
	Alert, Expr, For string
	Labels           map[string]string
}

// alertRules returns the PrometheusRule's rules by alert name.
func alertRules(t *testing.T, ms []Manifest) map[string]rule {
	t.Helper()
	out := map[string]rule{}
	for _, m := range ms {
		if m.Object.GetKind() != "PrometheusRule" {
			continue
		}
		groups, _, _ := unstructured.NestedSlice(m.Object.Object, "spec", "groups")
		for _, g := range groups {
			rs, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
			for _, r := range rs {
				data, err := json.Marshal(r)
				if err != nil {
					t.Fatal(err)
				}
				var got rule
				if err := json.Unmarshal(data, &got); err != nil {
					t.Fatal(err)
				}
				out[got.Alert] = got
			}
		}
	}
	return out
}

// query is one PromQL expression the chart renders, and where.
type query struct{ where, expr string }

// queries returns every alert expression and dashboard panel query of the rendered objects.
func queries(t *testing.T, ms []Manifest) []query {
	t.Helper()
	var out []query
	for name, r := range alertRules(t, ms) {
		out = append(out, query{"alert " + name, r.Expr})
	}
	for _, m := range ms {
		if m.Object.GetKind() != "ConfigMap" {
			continue
		}
		data, _, _ := unstructured.NestedStringMap(m.Object.Object, "data")
		for file, text := range data {
			var dash struct {
				Panels []dashPanel `json:"panels"`
			}
			if err := json.Unmarshal([]byte(text), &dash); err != nil {
				t.Fatalf("dashboard %s: %v", file, err)
			}
			var walk func([]dashPanel)
			walk = func(ps []dashPanel) {
				for _, p := range ps {
					if p.Type != "row" && len(p.Targets) == 0 {
						t.Errorf("dashboard panel %q has no query", p.Title)
					}
					for _, tg := range p.Targets {
						out = append(out, query{fmt.Sprintf("panel %q", p.Title), tg.Expr})
					}
					walk(p.Panels)
				}
			}
			walk(dash.Panels)
		}
	}
	return out
}

type dashPanel struct {
	Title   string      `json:"title"`
	Type    string      `json:"type"`
	Panels  []dashPanel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// targetLabels are the labels Prometheus gives a scraped series besides its own: job and
// instance always, and what the chart's PodMonitor relabels (job, control_plane_id) and the
// Prometheus operator adds for a pod target (namespace, pod, container, endpoint).
var targetLabels = sets.New("job", "instance", "namespace", "pod", "container", "endpoint", "control_plane_id")

// prometheusSeries are the series Prometheus itself writes for every target (not in any
// registry of ours): the scrape's health.
var prometheusSeries = map[string]sets.Set[string]{"up": sets.New[string]()}

// exportedSeries exercises every cdplane metric the way its code does for one plane, then
// gathers controller-runtime's registry, which the controller and the kubelet plugin serve at
// /metrics: the series names it exports (a histogram as _bucket, _sum and _count) and each one's
// label names.
func exportedSeries(t *testing.T) map[string]sets.Set[string] {
	t.Helper()
	const id = "monitoring-test"
	// The controller's write counter, through the client wrapper it installs.
	c := metrics.CountWrites(fake.NewClientBuilder().WithScheme(scheme.New()).Build(), id)
	if err := c.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns"}}); err != nil {
		t.Fatal(err)
	}
	// The domain gauges, from a source as the controller adds one.
	remove := metrics.ComputeDomains.Add(id, func() metrics.DomainCounts {
		return metrics.DomainCounts{Ready: 1, NotReady: 1, OldestNotReady: time.Now()}
	})
	t.Cleanup(remove)
	// The vectors, as their users update them (a vector exports nothing until it has a series).
	metrics.NodeJoinToReady.WithLabelValues(id).Observe(1)
	metrics.ControllerLeader.WithLabelValues(id).Set(1)
	metrics.ForeignRefusals.WithLabelValues(id, "Secret").Inc()
	metrics.SecretMirrorForeignTargets.WithLabelValues(id, "ns").Inc()
	metrics.SecretMirrorWriteConflicts.WithLabelValues(id, "ns").Inc()
	metrics.DomainsLabelled.WithLabelValues(id).Inc()
	p := metrics.KubeletPlugin
	p.PrepareDuration.WithLabelValues(id).Observe(0.1)
	p.UnprepareDuration.WithLabelValues(id).Observe(0.1)
	p.PrepareErrors.WithLabelValues(id, "other").Inc()
	p.UnprepareErrors.WithLabelValues(id, "other").Inc()
	p.PreparedClaims.WithLabelValues(id, "channel").Set(1)
	// A daemon's, in the registry of its own that it serves, every vector with a series.
	d := metrics.NewDaemonMetrics(metrics.DaemonIdentity{ControlPlaneID: id, DomainUID: "uid", NodeName: "n1"})
	d.StartToReady.WithLabelValues().Set(1)
	d.LastReady.WithLabelValues().Set(1)
	d.Blocked.WithLabelValues("HostIMEXInUse").Set(0)
	d.Restarts.WithLabelValues("exited").Inc()
	d.Exits.WithLabelValues("signal").Inc()
	d.ConfigWrites.WithLabelValues("hosts").Inc()
	d.ReadinessChecks.WithLabelValues("ready").Inc()
	daemon := prometheus.NewRegistry()
	daemon.MustRegister(d.Collectors()...)

	mfs, err := prometheus.Gatherers{crmetrics.Registry, daemon}.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]sets.Set[string]{}
	for _, mf := range mfs {
		names := sets.New[string]()
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				names.Insert(l.GetName())
			}
		}
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			out[mf.GetName()+"_bucket"] = names.Clone().Insert("le")
			out[mf.GetName()+"_sum"] = names
			out[mf.GetName()+"_count"] = names
		case dto.MetricType_SUMMARY:
			out[mf.GetName()] = names.Clone().Insert("quantile")
			out[mf.GetName()+"_sum"] = names
			out[mf.GetName()+"_count"] = names
		default:
			out[mf.GetName()] = names
		}
	}
	for name, l := range prometheusSeries {
		out[name] = l
	}
	return out
}

// checkQuery parses expr with Prometheus' own parser and returns what is wrong with it: a
// parse error, a selector without a metric name, a metric that is not exported, a matcher on a
// label the metric does not have, a selector without the plane's control_plane_id matcher.
func checkQuery(expr, planeID string, exported map[string]sets.Set[string]) []string {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return []string{fmt.Sprintf("does not parse: %v", err)}
	}
	var problems []string
	selectors := 0
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		selectors++
		name := vs.Name
		plane := false
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel {
				if m.Type == labels.MatchEqual {
					name = m.Value
				}
				continue
			}
			if m.Name == "control_plane_id" && m.Type == labels.MatchEqual && m.Value == planeID {
				plane = true
			}
		}
		have, ok := exported[name]
		switch {
		case name == "":
			problems = append(problems, fmt.Sprintf("selector %s names no metric", vs))
			return nil
		case !ok:
			problems = append(problems, fmt.Sprintf("metric %s is not exported by cdplane", name))
			return nil
		}
		for _, m := range vs.LabelMatchers {
			if m.Name != model.MetricNameLabel && !have.Has(m.Name) && !targetLabels.Has(m.Name) {
				problems = append(problems, fmt.Sprintf("metric %s has no label %s (it has %v)", name, m.Name, sets.List(have)))
			}
		}
		if !plane {
			problems = append(problems, fmt.Sprintf("selector %s does not select control_plane_id=%q", vs, planeID))
		}
		return nil
	})
	if selectors == 0 {
		problems = append(problems, "selects no series")
	}
	return problems
}

// TestMonitoringQueriesUseExportedMetrics: every alert expression and dashboard query of each
// plane parses as PromQL and selects, for that plane only, metrics cdplane really exports with
// labels they really have; every `for` is a Prometheus duration.
func TestMonitoringQueriesUseExportedMetrics(t *testing.T) {
	exported := exportedSeries(t)
	for _, id := range []string{"", "plane-a"} {
		t.Run("plane "+id, func(t *testing.T) {
			ms := monitoringObjects(t, id, monitoringOn)
			rules := alertRules(t, ms)
			wantAlerts := []string{"CDPlaneComputeDomainNotReady", "CDPlaneControllerNoLeader", "CDPlaneIMEXRestarting", "CDPlaneKubeletPluginDown", "CDPlaneKubeletPluginPrepareErrors"}
			if got := slices.Sorted(func(yield func(string) bool) {
				for k := range rules {
					if !yield(k) {
						return
					}
				}
			}); !slices.Equal(got, wantAlerts) {
				t.Errorf("alerts %v, want %v", got, wantAlerts)
			}
			for name, r := range rules {
				if r.For != "" {
					if _, err := model.ParseDuration(r.For); err != nil {
						t.Errorf("alert %s: for %q: %v", name, r.For, err)
					}
				}
				if r.Labels["severity"] == "" {
					t.Errorf("alert %s has no severity", name)
				}
			}
			qs := queries(t, ms)
			if len(qs) < len(wantAlerts)+10 {
				t.Fatalf("%d queries found, want the %d alerts' and the dashboard's", len(qs), len(wantAlerts))
			}
			for _, q := range qs {
				for _, p := range checkQuery(q.expr, id, exported) {
					t.Errorf("%s: %s: %s", q.where, q.expr, p)
				}
			}
		})
	}
}

// TestCheckQueryCatchesMistakes: the check above fails a misspelt metric, a histogram's bare
// name or a wrong suffix, a label the metric lacks, another plane's selector, a selector without
// the plane and a query that does not parse.
func TestCheckQueryCatchesMistakes(t *testing.T) {
	exported := exportedSeries(t)
	for name, tc := range map[string]struct{ expr, want string }{
		"misspelt":              {`cdplane_computedomain{control_plane_id="a"}`, "not exported"},
		"histogram bare name":   {`cdplane_node_join_to_ready_seconds{control_plane_id="a"}`, "not exported"},
		"counter with _bucket":  {`cdplane_api_writes_total_bucket{control_plane_id="a"}`, "not exported"},
		"missing label":         {`cdplane_computedomains{control_plane_id="a", reason="x"}`, "no label reason"},
		"another plane":         {`cdplane_computedomains{control_plane_id="b"}`, `control_plane_id="a"`},
		"no plane":              {`sum(rate(cdplane_api_writes_total[5m]))`, `control_plane_id="a"`},
		"no metric name":        {`{control_plane_id="a"}`, "names no metric"},
		"syntax":                {`sum(cdplane_computedomains{control_plane_id="a"}`, "parse"},
		"unknown in an or":      {`(sum(cdplane_controller_leaders{control_plane_id="a"}) or vector(0)) < 1`, "not exported"},
		"a Grafana variable":    {`rate(cdplane_api_writes_total{control_plane_id="a"}[$__rate_interval])`, "parse"},
		"good (for comparison)": {`(sum(cdplane_controller_leader{control_plane_id="a"}) or vector(0)) < 1`, ""},
	} {
		t.Run(name, func(t *testing.T) {
			problems := checkQuery(tc.expr, "a", exported)
			if tc.want == "" {
				if len(problems) > 0 {
					t.Errorf("problems %v, want none", problems)
				}
				return
			}
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("problems %v, want one containing %q", problems, tc.want)
			}
		})
	}
}
