package kubelet

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
)

// New refuses a node whose address is not a loopback address, is another node's, or lies in
// IMEX's sentinel block.
func TestNewNodeAddresses(t *testing.T) {
	cases := map[string]struct {
		ips     []string
		wantErr string // substring; empty for success
	}{
		"loopback":         {ips: []string{"127.10.0.1", "127.10.0.2"}},
		"not loopback":     {ips: []string{"10.0.0.1"}, wantErr: "must be a loopback address"},
		"used twice":       {ips: []string{"127.10.0.1", "127.10.0.1"}, wantErr: "used twice"},
		"a sentinel":       {ips: []string{"127.127.0.5"}, wantErr: "outside 127.127.0.0/16"},
		"sentinel block's": {ips: []string{"127.127.255.254"}, wantErr: "outside 127.127.0.0/16"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := Config{RESTConfig: &rest.Config{Host: "https://127.0.0.1:1"}, StateDir: t.TempDir()}
			for i, ip := range tc.ips {
				cfg.Nodes = append(cfg.Nodes, NodeSpec{Name: "n" + string(rune('a'+i)), InternalIP: ip})
			}
			_, err := New(cfg)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New: %v, want an error saying %q", err, tc.wantErr)
			}
		})
	}
}

// A container's restart delays: doubling from the first up to the cap, and from the first again
// after a run of RestartBackoffReset.
func TestNextRestartDelay(t *testing.T) {
	cfg := Config{RestartBackoff: backoffOrDefault(wait.Backoff{Duration: 10 * time.Second, Cap: time.Minute}, DefaultRestartBackoff), RestartBackoffReset: 10 * time.Minute}
	b := cfg.RestartBackoff
	var got []time.Duration
	for _, ran := range []time.Duration{0, time.Second, time.Second, time.Second, time.Minute, 10 * time.Minute, time.Second} {
		got = append(got, cfg.nextRestartDelay(&b, ran))
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, time.Minute, time.Minute, 10 * time.Second, 20 * time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("restart delays (-want +got):\n%s", diff)
	}
}

func TestBackoffOrDefault(t *testing.T) {
	for name, tc := range map[string]struct {
		in, want wait.Backoff
	}{
		"unset: the default": {in: wait.Backoff{}, want: DefaultRestartBackoff},
		"a first delay only": {
			in:   wait.Backoff{Duration: time.Second},
			want: wait.Backoff{Duration: time.Second, Factor: 2, Cap: DefaultRestartBackoff.Cap, Steps: DefaultRestartBackoff.Steps},
		},
		"a first delay over the cap: the cap": {
			in:   wait.Backoff{Duration: time.Minute, Cap: time.Second},
			want: wait.Backoff{Duration: time.Second, Factor: 2, Cap: time.Second, Steps: DefaultRestartBackoff.Steps},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, backoffOrDefault(tc.in, DefaultRestartBackoff)); diff != "" {
				t.Errorf("backoffOrDefault (-want +got):\n%s", diff)
			}
		})
	}
}
