package kubeletplugin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	draplugin "k8s.io/dynamic-resource-allocation/kubeletplugin"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin/cdi"
	"cdplane/internal/kubeletplugin/checkpoint"
	"cdplane/internal/kubeletplugin/claimlock"
	"cdplane/internal/kubeletplugin/claims"
	"cdplane/internal/kubeletplugin/devices"
	"cdplane/internal/kubeletplugin/endpoints"
	"cdplane/internal/kubeletplugin/failure"
	"cdplane/internal/metrics"
	"cdplane/internal/testutil"
)

// metricsDriver is a Driver with only what prepares answered from the checkpoint, prepares
// failing at planning and daemon unprepares need: a checkpoint and a CDI directory.
func metricsDriver(t *testing.T, m *metrics.KubeletPluginMetrics, plane string, entries map[types.UID]checkpoint.ClaimEntry) *Driver {
	t.Helper()
	dir := t.TempDir()
	cp, err := checkpoint.Open(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	for uid, e := range entries {
		if err := cp.Put(uid, e); err != nil {
			t.Fatal(err)
		}
	}
	cdi, err := cdi.NewWriter(filepath.Join(dir, "cdi"))
	if err != nil {
		t.Fatal(err)
	}
	d := &Driver{opts: Options{ReadyWaitTimeout: time.Second, StateDir: filepath.Join(dir, "state")},
		claims:  claims.New(claims.Config{StateDir: filepath.Join(dir, "state")}, claims.Deps{Checkpoint: cp, Specs: cdi, Locks: &claimlock.Locks{}}),
		metrics: newClaimMetrics(m, plane)}
	d.metrics.setPrepared(cp.Snapshot())
	return d
}

// TestClaimMetrics runs a known sequence of prepares and unprepares and reads every metric.
func TestClaimMetrics(t *testing.T) {
	const plane = "plane-a"
	m := metrics.NewKubeletPluginMetrics()
	completed := func(kind devices.DeviceKind) checkpoint.ClaimEntry {
		return checkpoint.ClaimEntry{State: checkpoint.PrepareCompleted, Namespace: "ns", Name: string(kind), Kind: string(kind), DomainID: testUID,
			Devices: []checkpoint.PreparedDevice{{Requests: []string{"r"}, Pool: "n1", Device: "channel-0"}}}
	}
	d := metricsDriver(t, m, plane, map[types.UID]checkpoint.ClaimEntry{
		"ch": completed(devices.KindChannel), "d1": completed(devices.KindDaemon), "d2": completed(devices.KindDaemon),
	})
	prepared := func(kind devices.DeviceKind) float64 {
		return promtest.ToFloat64(m.PreparedClaims.WithLabelValues(plane, string(kind)))
	}
	if got := [2]float64{prepared(devices.KindChannel), prepared(devices.KindDaemon)}; got != [2]float64{1, 2} {
		t.Fatalf("prepared claims (channel, daemon) at start = %v, want [1 2]", got)
	}

	// Two prepares answered from the checkpoint, one refused for its config.
	bad := testutil.MakeResourceClaim("claim", "ns").Allocated().Device("channel", cdv1beta1.DriverName, "n1", "channel-0").
		AllocatedConfig(resourcev1.AllocationConfigSourceClaim, cdv1beta1.DriverName, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig"}`, "channel").
		UID("bad").Obj()
	res, err := d.PrepareResourceClaims(context.Background(), []*resourcev1.ResourceClaim{
		testutil.MakeResourceClaim("channel", "ns").UID("ch").Obj(), testutil.MakeResourceClaim("daemon", "ns").UID("d1").Obj(), bad,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res["ch"].Err != nil || res["d1"].Err != nil || !failure.IsPermanent(res["bad"].Err) {
		t.Fatalf("prepare results %v, want two successes and a permanent error", res)
	}

	// One unprepare that succeeds, one whose checkpoint cannot be written (a directory holds
	// its place).
	if errs, _ := d.UnprepareResourceClaims(context.Background(), []draplugin.NamespacedObject{{UID: "d1"}}); errs["d1"] != nil {
		t.Fatalf("unprepare d1: %v", errs["d1"])
	}
	cpFile := filepath.Join(d.opts.StateDir, checkpoint.File)
	if err := os.Remove(cpFile); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(cpFile, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if errs, _ := d.UnprepareResourceClaims(context.Background(), []draplugin.NamespacedObject{{UID: "d2"}}); errs["d2"] == nil {
		t.Fatal("unprepare d2 succeeded without a checkpoint to write")
	}

	counts := func(c *prometheus.CounterVec, reasons []failure.Reason) map[failure.Reason]float64 {
		out := map[failure.Reason]float64{}
		for _, r := range reasons {
			out[r] = promtest.ToFloat64(c.WithLabelValues(plane, string(r)))
		}
		return out
	}
	wantPrepare := map[failure.Reason]float64{}
	for _, r := range failure.PrepareReasons {
		wantPrepare[r] = 0
	}
	wantPrepare[failure.BadConfig] = 1
	if diff := cmp.Diff(wantPrepare, counts(m.PrepareErrors, failure.PrepareReasons)); diff != "" {
		t.Errorf("prepare errors (-want +got):\n%s", diff)
	}
	wantUnprepare := map[failure.Reason]float64{failure.NodeLabel: 0, failure.CDI: 0, failure.Checkpoint: 1, failure.Other: 0}
	if diff := cmp.Diff(wantUnprepare, counts(m.UnprepareErrors, failure.UnprepareReasons)); diff != "" {
		t.Errorf("unprepare errors (-want +got):\n%s", diff)
	}
	for name, tc := range map[string]struct {
		vec  *prometheus.HistogramVec
		want uint64
	}{"prepare": {m.PrepareDuration, 3}, "unprepare": {m.UnprepareDuration, 2}} {
		if got := histogramCount(t, tc.vec, plane); got != tc.want {
			t.Errorf("%s duration count = %d, want %d", name, got, tc.want)
		}
	}
	// d1 is gone; d2 stays prepared (its unprepare failed).
	if got := [2]float64{prepared(devices.KindChannel), prepared(devices.KindDaemon)}; got != [2]float64{1, 1} {
		t.Errorf("prepared claims (channel, daemon) = %v, want [1 1]", got)
	}
	d.metrics.forget()
	if got := [2]float64{prepared(devices.KindChannel), prepared(devices.KindDaemon)}; got != [2]float64{0, 0} {
		t.Errorf("prepared claims after the plugin stopped = %v, want [0 0]", got)
	}
}

// TestClaimMetricsAddUp: two plugins of one plane in one process (the simulated cluster) add up
// in the prepared-claims gauge, each taking out its own share when it stops.
func TestClaimMetricsAddUp(t *testing.T) {
	m := metrics.NewKubeletPluginMetrics()
	a, b := newClaimMetrics(m, ""), newClaimMetrics(m, "")
	entry := checkpoint.ClaimEntry{State: checkpoint.PrepareCompleted, Kind: string(devices.KindChannel)}
	a.setPrepared(map[types.UID]checkpoint.ClaimEntry{"1": entry, "2": entry, "3": {State: checkpoint.PrepareStarted, Kind: string(devices.KindChannel)}})
	b.setPrepared(map[types.UID]checkpoint.ClaimEntry{"4": entry})
	gauge := m.PreparedClaims.WithLabelValues("", string(devices.KindChannel))
	if got := promtest.ToFloat64(gauge); got != 3 {
		t.Fatalf("prepared channel claims = %v, want 3", got)
	}
	a.forget()
	if got := promtest.ToFloat64(gauge); got != 1 {
		t.Errorf("after one plugin stopped: %v, want 1", got)
	}
}

// histogramCount returns how many observations the plane's histogram holds.
func histogramCount(t *testing.T, vec *prometheus.HistogramVec, plane string) uint64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(vec)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == metrics.LabelControlPlaneID && l.GetValue() == plane {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	t.Fatalf("no histogram series for plane %q", plane)
	return 0
}

// TestMetricsEndpoint scrapes the metrics endpoint on 127.0.0.1: the plugin's series are there,
// labelled with its plane, each failure reason from zero.
func TestMetricsEndpoint(t *testing.T) {
	eps, err := endpoints.Listen("", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eps.Stop)
	if err := eps.Serve(context.Background(), "", "", func() bool { return false }); err != nil {
		t.Fatal(err)
	}
	c := newClaimMetrics(metrics.KubeletPlugin, "unit-plane")
	t.Cleanup(c.forget)
	c.prepareDone(time.Now(), failure.Tag(failure.IMEXNotReady, errors.New("not ready")))
	resp, err := http.Get("http://" + eps.MetricsAddress() + endpoints.MetricsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`cdplane_kubeletplugin_prepare_errors_total{control_plane_id="unit-plane",reason="imex_not_ready"} 1`,
		`cdplane_kubeletplugin_prepare_errors_total{control_plane_id="unit-plane",reason="bad_config"} 0`,
		`cdplane_kubeletplugin_unprepare_errors_total{control_plane_id="unit-plane",reason="checkpoint"} 0`,
		`cdplane_kubeletplugin_prepare_duration_seconds_count{control_plane_id="unit-plane"} 1`,
		`cdplane_kubeletplugin_prepared_claims{control_plane_id="unit-plane",kind="channel"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
