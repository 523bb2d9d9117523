package daemon

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/util/wait"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/daemonenv"
	"cdplane/internal/imex"
	"cdplane/internal/metrics"
	"cdplane/internal/version"
)

// testStart is when the supervisor tests' daemon starts: the harness clock's origin.
var testStart = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// metricsConfig is the identity of the supervisor tests' daemon (node n1).
var metricsConfig = Config{NodeName: "n1", CDUID: testUID, CDNamespace: "ns", CDName: "cd", CliqueID: "c.1"}

// identity are the labels every series of metricsConfig's daemon in plane-a carries.
var identity = map[string]string{
	metrics.LabelControlPlaneID: "plane-a", metrics.LabelComputeDomainUID: testUID, metrics.LabelNode: "n1",
}

// series gathers g and returns every series by name and its other labels
// (name{label="value",...}), checking that each carries the daemon's identity.
func series(t *testing.T, g prometheus.Gatherer, identity map[string]string) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			own := map[string]string{}
			var rest []string
			for _, l := range m.GetLabel() {
				if _, ok := identity[l.GetName()]; ok {
					own[l.GetName()] = l.GetValue()
					continue
				}
				rest = append(rest, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			if diff := cmp.Diff(identity, own); diff != "" {
				t.Errorf("%s{%v}: identity labels (-want +got):\n%s", mf.GetName(), rest, diff)
			}
			key := mf.GetName()
			if len(rest) > 0 {
				slices.Sort(rest)
				key += "{" + strings.Join(rest, ",") + "}"
			}
			out[key] = value(mf.GetType(), m)
		}
	}
	return out
}

func value(t dto.MetricType, m *dto.Metric) float64 {
	switch t {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	}
	return m.GetUntyped().GetValue()
}

// freshSeries are the series of a daemon that has seen nothing yet.
func freshSeries() map[string]float64 {
	want := map[string]float64{
		fmt.Sprintf(`cdplane_daemon_info{clique_id="c.1",compute_domain_name="cd",compute_domain_namespace="ns",version=%q}`, version.Version): 1,
		"cdplane_daemon_registered":                           0,
		"cdplane_daemon_ready":                                0,
		"cdplane_daemon_clique_index":                         -1,
		"cdplane_daemon_imex_peers":                           0,
		"cdplane_daemon_imex_peers_left_out":                  0,
		"cdplane_daemon_imex_starts_total":                    0,
		"cdplane_daemon_imex_start_errors_total":              0,
		"cdplane_daemon_imex_reloads_total":                   0,
		"cdplane_daemon_sync_errors_total":                    0,
		`cdplane_daemon_imex_blocked{reason="FabricError"}`:   0,
		`cdplane_daemon_imex_blocked{reason="HostIMEXInUse"}`: 0,
	}
	for _, r := range []string{"exited", "config_changed", "index_changed"} {
		want[fmt.Sprintf(`cdplane_daemon_imex_restarts_total{reason=%q}`, r)] = 0
	}
	for _, r := range []string{"exit_status", "signal", "session_in_use", "other"} {
		want[fmt.Sprintf(`cdplane_daemon_imex_exits_total{reason=%q}`, r)] = 0
	}
	for _, r := range []string{"ready", "not_ready", "error"} {
		want[fmt.Sprintf(`cdplane_daemon_imex_readiness_checks_total{result=%q}`, r)] = 0
	}
	for _, f := range []string{"imexd.cfg", "nodes.cfg", "hosts"} {
		want[fmt.Sprintf(`cdplane_daemon_imex_config_writes_total{file=%q}`, f)] = 0
	}
	return want
}

// TestDaemonMetrics runs a supervisor through a known sequence — waiting for its entry, the
// first start, its entry turning Ready, a peer joining (a readiness query and a reload), IMEX
// killed and started again, its index moving (a restart) — and reads the daemon's registry
// after each step.
func TestDaemonMetrics(t *testing.T) {
	m := NewMetrics(metricsConfig, "plane-a", testStart)
	want := freshSeries()
	expect := func(step string) {
		t.Helper()
		if diff := cmp.Diff(want, series(t, m.Registry(), identity)); diff != "" {
			t.Fatalf("%s: series (-want +got):\n%s", step, diff)
		}
	}
	expect("before anything")

	// Only another node's entry: nothing written, nothing started.
	h := start(t, setup{dnsNames: true, metrics: m}, peer(2))
	h.expectTimer(50 * time.Millisecond).fire()
	h.expectNoCalls()
	expect("waiting for the entry")

	// The entry appears: the files written, IMEX started.
	h.view.set(peer(1), peer(2))
	h.poke()
	h.expectCalls("Start")
	h.settle()
	maps.Copy(want, map[string]float64{
		"cdplane_daemon_registered": 1, "cdplane_daemon_clique_index": 0, "cdplane_daemon_imex_peers": 2,
		"cdplane_daemon_imex_starts_total":                          1,
		`cdplane_daemon_imex_config_writes_total{file="imexd.cfg"}`: 1,
		`cdplane_daemon_imex_config_writes_total{file="nodes.cfg"}`: 1,
		`cdplane_daemon_imex_config_writes_total{file="hosts"}`:     1,
	})
	expect("first start")

	// The entry turns Ready 7 s after the daemon started.
	h.advance(7 * time.Second)
	h.view.setReady("n1", true)
	h.settle()
	maps.Copy(want, map[string]float64{"cdplane_daemon_ready": 1, "cdplane_daemon_start_to_ready_seconds": 7})
	expect("entry Ready")

	// A peer joins: the hosts file changes; the reload waits for one readiness query.
	h.view.set(peer(1), peer(2), peer(3))
	h.poke()
	h.expectCalls("Reload")
	h.settle()
	maps.Copy(want, map[string]float64{
		"cdplane_daemon_imex_peers": 3, "cdplane_daemon_imex_reloads_total": 1,
		`cdplane_daemon_imex_config_writes_total{file="hosts"}`:      2,
		`cdplane_daemon_imex_readiness_checks_total{result="ready"}`: 1,
		"cdplane_daemon_imex_last_ready_timestamp_seconds":           float64(testStart.Add(7 * time.Second).Unix()),
	})
	expect("a peer joined")

	// IMEX is killed: an exit by signal, a restart after the backoff, and (after a restart)
	// one readiness query that finds it Ready and so ends the questions.
	h.advance(time.Minute)
	h.imex.end(&imex.ExitError{Binary: "nvidia-imex", Code: -1, Signal: "killed"})
	h.expectTimer(time.Second).fire()
	h.expectCalls("Start")
	h.settle()
	maps.Copy(want, map[string]float64{
		`cdplane_daemon_imex_exits_total{reason="signal"}`:           1,
		`cdplane_daemon_imex_restarts_total{reason="exited"}`:        1,
		"cdplane_daemon_imex_starts_total":                           2,
		`cdplane_daemon_imex_readiness_checks_total{result="ready"}`: 2,
		"cdplane_daemon_imex_last_ready_timestamp_seconds":           float64(testStart.Add(67 * time.Second).Unix()),
	})
	expect("IMEX killed and started again")

	// The entry loses Ready and this node's index moves: a restart; the start-to-Ready time
	// stays the first one.
	moved := peer(1)
	moved.Index = 5
	h.view.setReady("n1", false)
	h.view.set(moved, peer(2), peer(3))
	h.poke()
	h.expectCalls("Stop", "Start")
	h.settle()
	maps.Copy(want, map[string]float64{
		"cdplane_daemon_clique_index": 5, "cdplane_daemon_ready": 0, "cdplane_daemon_imex_starts_total": 3,
		`cdplane_daemon_imex_restarts_total{reason="index_changed"}`: 1,
		`cdplane_daemon_imex_config_writes_total{file="hosts"}`:      3,
	})
	expect("index moved")
	h.view.setReady("n1", true)
	h.settle()
	want["cdplane_daemon_ready"] = 1
	expect("Ready again")

	// The entry goes: not registered, no index.
	h.view.set(peer(2), peer(3))
	h.settle()
	maps.Copy(want, map[string]float64{"cdplane_daemon_registered": 0, "cdplane_daemon_clique_index": -1, "cdplane_daemon_ready": 0})
	expect("entry gone")
}

// TestDaemonMetricsConfigChangeAndFailures: with addresses in nodes.cfg a join restarts IMEX
// (config_changed); a config that cannot be written is a sync error; a start that fails because
// a host IMEX holds the session is a start error and blocks IMEX; an exit with a status is
// counted as such.
func TestDaemonMetricsConfigChangeAndFailures(t *testing.T) {
	m := NewMetrics(metricsConfig, "plane-a", testStart)
	want := freshSeries()
	h := start(t, setup{metrics: m}, peer(1), peer(2))
	h.firstStart()
	h.view.set(peer(1), peer(2), peer(3))
	h.poke()
	h.expectCalls("Stop", "Start")
	h.imex.end(&imex.ExitError{Binary: "nvidia-imex", Code: 1})
	h.expectTimer(time.Second)
	h.settle()
	maps.Copy(want, map[string]float64{
		"cdplane_daemon_registered": 1, "cdplane_daemon_clique_index": 0, "cdplane_daemon_imex_peers": 3,
		"cdplane_daemon_imex_starts_total":                            2,
		`cdplane_daemon_imex_restarts_total{reason="config_changed"}`: 1,
		`cdplane_daemon_imex_restarts_total{reason="exited"}`:         1,
		`cdplane_daemon_imex_exits_total{reason="exit_status"}`:       1,
		`cdplane_daemon_imex_config_writes_total{file="imexd.cfg"}`:   1,
		`cdplane_daemon_imex_config_writes_total{file="nodes.cfg"}`:   2,
	})
	if diff := cmp.Diff(want, series(t, m.Registry(), identity)); diff != "" {
		t.Fatalf("after a config change and an exit (-want +got):\n%s", diff)
	}

	m = NewMetrics(metricsConfig, "plane-a", testStart)
	want = freshSeries()
	// No retry of a held session: the first NV_ERR_IN_USE is reported.
	h = start(t, setup{dnsNames: true, metrics: m, sessionInUseRetry: -1}, peer(1))
	if err := os.Mkdir(h.cfg.NodesConfigPath(), 0o755); err != nil {
		t.Fatal(err)
	}
	h.expectTimer(50 * time.Millisecond).fire()
	h.settle()
	// Three passes (the first look, the two of settle), each failing; the last may still run.
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, waitLimit, true, func(context.Context) (bool, error) {
		return series(t, m.Registry(), identity)["cdplane_daemon_sync_errors_total"] == 3, nil
	}); err != nil {
		t.Fatalf("sync errors %v, want 3: %v", series(t, m.Registry(), identity)["cdplane_daemon_sync_errors_total"], err)
	}
	if err := os.Remove(h.cfg.NodesConfigPath()); err != nil {
		t.Fatal(err)
	}
	h.imex.failNextStart(fmt.Errorf("starting: %w", &imex.ExitError{Binary: "nvidia-imex", Code: 1, Stderr: "IMEX session: NV_ERR_IN_USE"}))
	h.poke()
	h.expectCalls("Start")
	select {
	case <-h.reports:
	case <-time.After(waitLimit):
		t.Fatalf("IMEX blocked not reported within %s", waitLimit)
	}
	h.settle()
	maps.Copy(want, map[string]float64{
		"cdplane_daemon_registered": 1, "cdplane_daemon_clique_index": 0, "cdplane_daemon_imex_peers": 1,
		"cdplane_daemon_sync_errors_total":                    3, // no more once the config could be written
		"cdplane_daemon_imex_start_errors_total":              1,
		`cdplane_daemon_imex_blocked{reason="HostIMEXInUse"}`: 1,
		// The hosts file was written by the first pass, before nodes.cfg failed.
		`cdplane_daemon_imex_config_writes_total{file="hosts"}`:     1,
		`cdplane_daemon_imex_config_writes_total{file="nodes.cfg"}`: 1,
		`cdplane_daemon_imex_config_writes_total{file="imexd.cfg"}`: 1,
	})
	if diff := cmp.Diff(want, series(t, m.Registry(), identity)); diff != "" {
		t.Errorf("after failed config writes and a blocked start (-want +got):\n%s", diff)
	}
}

// Two daemons' metrics, each served on its own address at the same port (in-process daemons of
// a simulated cluster, each on its pod's loopback address), each serve their own series only.
func TestMetricsEndpointsOfTwoDaemons(t *testing.T) {
	scrape := func(addr string) string {
		t.Helper()
		resp, err := http.Get("http://" + addr + MetricsPath)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s, %v", addr, resp.Status, err)
		}
		return string(body)
	}
	a := NewMetrics(Config{NodeName: "a", CDUID: testUID, CliqueID: "c.1"}, "plane-a", testStart)
	b := NewMetrics(Config{NodeName: "b", CDUID: testUID, CliqueID: "c.1"}, "plane-a", testStart)
	epA, err := ListenMetrics("127.0.0.1:0", a.Registry())
	if err != nil {
		t.Fatal(err)
	}
	defer epA.Close()
	_, port, _ := strings.Cut(epA.Addr(), ":")
	epB, err := ListenMetrics("127.0.0.2:"+port, b.Registry())
	if err != nil {
		t.Skipf("no second loopback address here: %v", err)
	}
	defer epB.Close()
	a.membership(&imex.Peer{NodeName: "a", Index: 3}, true, testStart.Add(time.Second))
	a.blocked(cdv1beta1.IMEXBlockedFabricError)

	bodyA, bodyB := scrape(epA.Addr()), scrape(epB.Addr())
	for _, line := range []string{
		`cdplane_daemon_clique_index{compute_domain_uid="` + testUID + `",control_plane_id="plane-a",node="a"} 3`,
		`cdplane_daemon_start_to_ready_seconds{compute_domain_uid="` + testUID + `",control_plane_id="plane-a",node="a"} 1`,
	} {
		if !strings.Contains(bodyA, line+"\n") {
			t.Errorf("daemon a's endpoint lacks %s:\n%s", line, bodyA)
		}
	}
	if strings.Contains(bodyA, `node="b"`) || strings.Contains(bodyB, `node="a"`) {
		t.Errorf("an endpoint serves the other daemon's series:\n%s\n---\n%s", bodyA, bodyB)
	}
	if want := `cdplane_daemon_clique_index{compute_domain_uid="` + testUID + `",control_plane_id="plane-a",node="b"} -1`; !strings.Contains(bodyB, want+"\n") {
		t.Errorf("daemon b's endpoint lacks %s:\n%s", want, bodyB)
	}
	if _, err := ListenMetrics(epA.Addr(), a.Registry()); err == nil {
		t.Errorf("a second endpoint on %s started: want the taken address refused", epA.Addr())
	}
}

func TestValidateMetricsAddress(t *testing.T) {
	for addr, want := range map[string]string{
		"0": "", "": "", "$(POD_IP):8082": "", "127.0.0.1:8082": "", ":8082": "",
		"8082":          "want host:port",
		"1.2.3.4:http":  "not a port number",
		"1.2.3.4:70000": "not a port number",
		"1.2.3.4:50000": "IMEX's",
		"1.2.3.4:50005": "IMEX's",
	} {
		err := validateMetricsAddress(addr)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("validateMetricsAddress(%q) = %v, want %q", addr, err, want)
		}
	}
}

// The ports the controller keeps the metrics endpoint off are the ones IMEX is configured with.
func TestReservedPortsAreIMEXs(t *testing.T) {
	if daemonenv.IMEXServerPort != imex.DefaultServerPort || daemonenv.IMEXCommandPort != imex.DefaultCmdPort {
		t.Errorf("daemonenv's IMEX ports %d, %d; IMEX's %d, %d", daemonenv.IMEXServerPort, daemonenv.IMEXCommandPort, imex.DefaultServerPort, imex.DefaultCmdPort)
	}
}
