package kubeletplugin

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/metrics"
	"cdplane/internal/testutil"
)

// TestHealthAndMetrics starts a plugin of a plane of its own with its health service and
// metrics endpoint on 127.0.0.1, asks the health service over gRPC as the kubelet's probe does
// (SERVING once the plugin serves the kubelet), prepares a channel claim, and scrapes the
// metrics over HTTP: one prepare observed in the plane's series, no error, one prepared channel
// claim.
func TestHealthAndMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plane := "hm-" + e.ns[len(e.ns)-5:]
	n := e.addNode(50, inPlane(plane))
	n.startWith(4, testr.NewWithOptions(t, testr.Options{Verbosity: 1}), func(o *kubeletplugin.Options) {
		o.HealthAddress, o.MetricsAddress = "127.0.0.1:0", "127.0.0.1:0"
	})

	conn, err := grpc.NewClient(n.drv.HealthAddress(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	health := healthpb.NewHealthClient(conn)
	e.Eventually(30*time.Second, "health service SERVING", func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: kubeletplugin.HealthServiceLiveness})
		if err != nil {
			return false, err
		}
		return resp.Status == healthpb.HealthCheckResponse_SERVING, fmt.Errorf("status %s", resp.Status)
	})

	ns := testCluster.Namespace(t, map[string]string{cdv1beta1.ControlPlaneLabel: plane})
	cd := testutil.MakeComputeDomain("hm").Namespace(ns).NumNodes(1).Label(cdv1beta1.ControlPlaneLabel, plane).Obj()
	if err := createAdmitted(e.Ctx(), e.C, cd); err != nil {
		t.Fatal(err)
	}
	e.setClique(cd, n, cdv1beta1.StatusReady)
	n.mustPrepare(e.channelClaim(ns, "hm", n, cd, cdv1beta1.AllocationModeSingle))

	families := scrape(t, "http://"+n.drv.MetricsAddress()+kubeletplugin.MetricsPath)
	if got := histogramCount(families[metrics.KubeletPluginPrepareDurationName], plane); got != 1 {
		t.Errorf("%s{control_plane_id=%q} count = %d, want 1", metrics.KubeletPluginPrepareDurationName, plane, got)
	}
	if got := sum(families[metrics.KubeletPluginPrepareErrorsName], plane); got != 0 {
		t.Errorf("%s{control_plane_id=%q} = %v, want 0", metrics.KubeletPluginPrepareErrorsName, plane, got)
	}
	if got := sum(families[metrics.KubeletPluginPreparedClaimsName], plane, metrics.LabelKind, "channel"); got != 1 {
		t.Errorf("%s{control_plane_id=%q,kind=channel} = %v, want 1", metrics.KubeletPluginPreparedClaimsName, plane, got)
	}
}

// scrape reads a Prometheus text endpoint.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return families
}

// matches reports whether m carries the plane's label and the label pairs kv.
func matches(m *dto.Metric, plane string, kv ...string) bool {
	want := map[string]string{metrics.LabelControlPlaneID: plane}
	for i := 0; i+1 < len(kv); i += 2 {
		want[kv[i]] = kv[i+1]
	}
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			delete(want, l.GetName())
		}
	}
	return len(want) == 0
}

// histogramCount is the sample count of the plane's series of a histogram; -1 when absent.
func histogramCount(f *dto.MetricFamily, plane string) int64 {
	for _, m := range f.GetMetric() {
		if matches(m, plane) {
			return int64(m.GetHistogram().GetSampleCount())
		}
	}
	return -1
}

// sum adds the values of the plane's series of a counter or gauge matching kv; -1 when none.
func sum(f *dto.MetricFamily, plane string, kv ...string) float64 {
	total, found := 0.0, false
	for _, m := range f.GetMetric() {
		if matches(m, plane, kv...) {
			found = true
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	if !found {
		return -1
	}
	return total
}
