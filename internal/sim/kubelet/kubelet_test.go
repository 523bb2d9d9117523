package kubelet

import (
	"strings"
	"testing"

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
