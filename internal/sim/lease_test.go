package sim

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"cdplane/internal/sim/imexsim"
	"cdplane/internal/sim/kubelet"
	"cdplane/internal/sim/nodehost"
)

// Node Leases are renewed like a kubelet's in small sims and less often in large ones, so the
// whole sim writes about 40 a second; the timing survives the state file.
func TestNodeLeaseRenew(t *testing.T) {
	for _, c := range []struct {
		nodes int
		want  time.Duration
	}{{1, 10 * time.Second}, {36, 10 * time.Second}, {400, 10 * time.Second}, {401, 11 * time.Second}, {1152, 29 * time.Second}, {20000, 500 * time.Second}} {
		if got := nodeLeaseRenew(c.nodes); got != c.want {
			t.Errorf("%d nodes: renew every %s, want %s", c.nodes, got, c.want)
		}
		if rate := float64(c.nodes) / nodeLeaseRenew(c.nodes).Seconds(); c.nodes > 400 && rate > 40 {
			t.Errorf("%d nodes: %.1f renewals a second", c.nodes, rate)
		}
	}

	raw, err := json.Marshal(State{NodeLeaseRenew: metav1.Duration{Duration: 29 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"nodeLeaseRenew":"29s"`) {
		t.Errorf("state file format changed: %s", raw)
	}
	if back.NodeLeaseRenew.Duration != 29*time.Second {
		t.Errorf("state round trip: %s in %s", back.NodeLeaseRenew.Duration, raw)
	}
	// State written before the field existed reads as zero: the kubelet's default.
	var old State
	if err := json.Unmarshal([]byte(`{"nodes":[]}`), &old); err != nil || old.NodeLeaseRenew.Duration != 0 {
		t.Errorf("old state: %v, %s", err, old.NodeLeaseRenew.Duration)
	}
	if err := json.Unmarshal([]byte(`{"nodeLeaseRenew":"soon"}`), &old); err == nil {
		t.Error("a malformed duration was accepted")
	}
}

// Probes run as their specs say up to 1,000 nodes, and above no more often than a second per 100
// nodes (each kind of probe runs at most about 100 times a second across the sim), with at least
// 10 s to answer.
func TestProbePeriodFloor(t *testing.T) {
	for _, c := range []struct {
		nodes int
		want  time.Duration
	}{{1, 0}, {1000, 0}, {1001, 11 * time.Second}, {1152, 12 * time.Second}, {2304, 24 * time.Second}, {20016, 201 * time.Second}} {
		got := probePeriodFloor(c.nodes)
		if got != c.want {
			t.Errorf("%d nodes: probes at most every %s, want %s", c.nodes, got, c.want)
		}
		if got > 0 && float64(c.nodes)/got.Seconds() > 100 {
			t.Errorf("%d nodes: a 1-second probe would run %.1f times a second", c.nodes, float64(c.nodes)/got.Seconds())
		}
	}
	for nodes, want := range map[int]time.Duration{36: 0, 1000: 0, 1001: 10 * time.Second, 2304: 10 * time.Second} {
		if got := probeTimeoutFloor(nodes); got != want {
			t.Errorf("%d nodes: probe timeouts at least %s, want %s", nodes, got, want)
		}
		if got := imexLinkRetryMax(nodes); got != want/2 {
			t.Errorf("%d nodes: simulated IMEX retries a peer at most every %s, want %s", nodes, got, want/2)
		}
		if got := http2PingTimeout(nodes); got != 30*want {
			t.Errorf("%d nodes: clients wait %s for a health check's answer, want %s", nodes, got, 30*want)
		}
	}
	for nodes, want := range map[int]int32{36: 0, 1000: 0, 1001: 10, 2304: 10} {
		if got := livenessFailureFloor(nodes); got != want {
			t.Errorf("%d nodes: liveness kills after at least %d misses in a row, want %d", nodes, got, want)
		}
	}
	raw, err := json.Marshal(State{ProbePeriodFloor: metav1.Duration{Duration: 24 * time.Second}, ProbeTimeoutFloor: metav1.Duration{Duration: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(raw, &back); err != nil || back.ProbePeriodFloor.Duration != 24*time.Second || back.ProbeTimeoutFloor.Duration != 10*time.Second {
		t.Errorf("state round trip: %v, %s in %s", err, back.ProbePeriodFloor.Duration, raw)
	}
	var old State
	if err := json.Unmarshal([]byte(`{"nodes":[]}`), &old); err != nil || old.ProbePeriodFloor.Duration != 0 {
		t.Errorf("state written before the field: %v, %s, want 0 (probes as their specs say)", err, old.ProbePeriodFloor.Duration)
	}
}

// A 2,304-node sim's state carries its timings into every kubelet process's configuration and
// every container's environment; a 36-node one keeps a kubelet's and IMEX's own.
func TestTimingsReachTheKubelet(t *testing.T) {
	large, small := &State{}, &State{}
	large.setTimings(2304)
	small.setTimings(36)

	var c kubelet.Config
	large.kubeletTimings(&c)
	want := kubelet.Config{LeaseRenewInterval: 58 * time.Second, LeaseDuration: 232 * time.Second,
		MinProbePeriod: 24 * time.Second, MinProbeTimeout: 10 * time.Second, MinLivenessFailures: 10}
	if c.LeaseRenewInterval != want.LeaseRenewInterval || c.LeaseDuration != want.LeaseDuration ||
		c.MinProbePeriod != want.MinProbePeriod || c.MinProbeTimeout != want.MinProbeTimeout ||
		c.MinLivenessFailures != want.MinLivenessFailures {
		t.Errorf("2,304 nodes: lease %s/%s, probes every >= %s with >= %s, liveness kills after >= %d; want %s/%s, %s, %s, %d",
			c.LeaseRenewInterval, c.LeaseDuration, c.MinProbePeriod, c.MinProbeTimeout, c.MinLivenessFailures,
			want.LeaseRenewInterval, want.LeaseDuration, want.MinProbePeriod, want.MinProbeTimeout, want.MinLivenessFailures)
	}
	if diff := cmp.Diff([]kubelet.EnvVar{{Name: nodehost.NodeDirEnv, Value: "/n"}, {Name: imexsim.LinkRetryMaxEnv, Value: "5s"}},
		large.hostEnv("r00n00", "/n")); diff != "" {
		t.Errorf("2,304 nodes: host environment (-want +got):\n%s", diff)
	}

	t.Setenv(HTTP2PingTimeoutEnv, "")
	large.applyHTTP2PingTimeout()
	if got := os.Getenv(HTTP2PingTimeoutEnv); got != "300" {
		t.Errorf("2,304 nodes: %s=%q, want 300", HTTP2PingTimeoutEnv, got)
	}
	t.Setenv(HTTP2PingTimeoutEnv, "7")
	large.applyHTTP2PingTimeout()
	if got := os.Getenv(HTTP2PingTimeoutEnv); got != "7" {
		t.Errorf("2,304 nodes with %s set to 7: %q, want it left as set", HTTP2PingTimeoutEnv, got)
	}
	t.Setenv(HTTP2PingTimeoutEnv, "")
	small.applyHTTP2PingTimeout()
	if got := os.Getenv(HTTP2PingTimeoutEnv); got != "" {
		t.Errorf("36 nodes: %s=%q, want client-go's default", HTTP2PingTimeoutEnv, got)
	}

	c = kubelet.Config{}
	small.kubeletTimings(&c)
	if c.MinProbePeriod != 0 || c.MinProbeTimeout != 0 || c.MinLivenessFailures != 0 || c.LeaseRenewInterval != 10*time.Second {
		t.Errorf("36 nodes: lease every %s, probe floors %s, %s and %d; want 10s and none", c.LeaseRenewInterval, c.MinProbePeriod, c.MinProbeTimeout, c.MinLivenessFailures)
	}
	if diff := cmp.Diff([]kubelet.EnvVar{{Name: nodehost.NodeDirEnv, Value: "/n"}}, small.hostEnv("r00n00", "/n")); diff != "" {
		t.Errorf("36 nodes: host environment (-want +got):\n%s", diff)
	}
}
