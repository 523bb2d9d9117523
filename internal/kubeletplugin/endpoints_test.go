package kubeletplugin

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"cdplane/internal/kubeletplugin/failure"
	"cdplane/internal/metrics"
)

// TestListenTakenPort: a taken port fails the start, naming the endpoint.
func TestListenTakenPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	for name, addrs := range map[string][2]string{"health service": {l.Addr().String(), ""}, "metrics endpoint": {"", l.Addr().String()}} {
		eps, err := listen(addrs[0], addrs[1])
		if err == nil || !strings.Contains(err.Error(), name) {
			eps.stop()
			t.Errorf("listen on a taken port for the %s: %v, want an error naming it", name, err)
		}
	}
}

// TestMetricsEndpoint scrapes the metrics endpoint on 127.0.0.1: the plugin's series are there,
// labelled with its plane, each failure reason from zero.
func TestMetricsEndpoint(t *testing.T) {
	eps, err := listen("", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eps.stop)
	if err := eps.serve(context.Background(), "", "", func() bool { return false }); err != nil {
		t.Fatal(err)
	}
	c := newClaimMetrics(metrics.KubeletPlugin, "unit-plane")
	t.Cleanup(c.forget)
	c.prepareDone(time.Now(), failure.Tag(failure.IMEXNotReady, errors.New("not ready")))
	resp, err := http.Get("http://" + addr(eps.metricsLis) + MetricsPath)
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
