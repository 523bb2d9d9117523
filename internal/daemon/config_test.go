package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"cdplane/internal/nvml"
)

func fullEnv() map[string]string {
	return map[string]string{
		"NODE_NAME": "n1", "POD_IP": "127.0.0.5", "POD_NAME": "p", "POD_NAMESPACE": "driver", "POD_UID": "pu",
		"CLIQUE_ID": "c.1", "COMPUTE_DOMAIN_UUID": "uid", "COMPUTE_DOMAIN_NAME": "cd", "COMPUTE_DOMAIN_NAMESPACE": "ns",
	}
}

func TestConfigFromEnv(t *testing.T) {
	cases := map[string]struct {
		change   map[string]*string
		fallback func() (string, error)
		want     *Config
		wantErr  string
	}{
		"complete": {
			want: &Config{NodeName: "n1", PodIP: "127.0.0.5", PodName: "p", PodNamespace: "driver", PodUID: "pu", CliqueID: "c.1",
				CDUID: "uid", CDName: "cd", CDNamespace: "ns", MaxNodes: 18, DNSNames: true, ConfigDir: "/etc/nvidia-imex", HostsPath: "/etc/hosts"},
		},
		"missing node name":                {change: map[string]*string{"NODE_NAME": nil}, wantErr: "environment variable NODE_NAME is not set"},
		"missing pod IP":                   {change: map[string]*string{"POD_IP": nil}, wantErr: "POD_IP is not set: it must hold the pod's IP"},
		"missing domain UID":               {change: map[string]*string{"COMPUTE_DOMAIN_UUID": nil}, wantErr: "COMPUTE_DOMAIN_UUID is not set"},
		"empty clique: fabric-less":        {change: map[string]*string{"CLIQUE_ID": ptr("")}, want: &Config{CliqueID: ""}},
		"missing clique without discovery": {change: map[string]*string{"CLIQUE_ID": nil}, wantErr: "CLIQUE_ID is not set"},
		"missing clique, discovered": {
			change: map[string]*string{"CLIQUE_ID": nil}, fallback: func() (string, error) { return "d.2", nil }, want: &Config{CliqueID: "d.2"},
		},
		"missing clique, discovery fails": {
			change:   map[string]*string{"CLIQUE_ID": nil},
			fallback: func() (string, error) { return "", errors.New("NVML cannot be initialised") },
			wantErr:  "CLIQUE_ID is not set and discovering the clique failed: NVML cannot be initialised",
		},
		"bad max nodes": {change: map[string]*string{"MAX_NODES_PER_IMEX_DOMAIN": ptr("many")}, wantErr: `MAX_NODES_PER_IMEX_DOMAIN="many"`},
		"max nodes":     {change: map[string]*string{"MAX_NODES_PER_IMEX_DOMAIN": ptr("4")}, want: &Config{MaxNodes: 4}},
		"bad verbosity": {change: map[string]*string{"LOG_VERBOSITY": ptr("-1")}, wantErr: `LOG_VERBOSITY="-1"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			env := fullEnv()
			for k, v := range tc.change {
				if v == nil {
					delete(env, k)
				} else {
					env[k] = *v
				}
			}
			got, err := ConfigFromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }, tc.fallback)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if name == "complete" {
				if diff := cmp.Diff(*tc.want, got); diff != "" {
					t.Errorf("config (-want +got):\n%s", diff)
				}
				return
			}
			if tc.want.MaxNodes != 0 && got.MaxNodes != tc.want.MaxNodes {
				t.Errorf("MaxNodes = %d, want %d", got.MaxNodes, tc.want.MaxNodes)
			}
			if got.CliqueID != tc.want.CliqueID && tc.want.MaxNodes == 0 {
				t.Errorf("CliqueID = %q, want %q", got.CliqueID, tc.want.CliqueID)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func TestDiscoverClique(t *testing.T) {
	cluster, err := nvml.ParseUUID("7f9c1b2e-0d7a-4c1f-9a55-3b6f2f0e8c11")
	if err != nil {
		t.Fatal(err)
	}
	reading := func(state nvml.FabricState, status nvml.FabricStatus) discoverer {
		f := nvml.FabricInfo{Supported: true, ClusterUUID: cluster, CliqueID: 3, State: state, Status: status}
		return discoverer{gpus: []nvml.GPU{{Index: 0, UUID: "GPU-a", Fabric: f}, {Index: 1, UUID: "GPU-b", Fabric: f}}}
	}
	ok := reading(nvml.FabricStateCompleted, 0)
	failed := reading(nvml.FabricStateCompleted, 1)
	notReady := reading(nvml.FabricStateInProgress, 0)
	unavailable := discoverer{err: fmt.Errorf("%w: no library", nvml.ErrNVMLUnavailable)}

	if id, err := DiscoverClique(context.Background(), ok, true, time.Millisecond, logr.Discard()); err != nil || id != "7f9c1b2e-0d7a-4c1f-9a55-3b6f2f0e8c11.3" {
		t.Errorf("completed fabric: id=%q err=%v", id, err)
	}
	if _, err := DiscoverClique(context.Background(), failed, true, time.Millisecond, logr.Discard()); !errors.Is(err, nvml.ErrFabricFailed) {
		t.Errorf("failed fabric with CrashOnNVLinkFabricErrors: err=%v, want ErrFabricFailed", err)
	}
	if _, err := DiscoverClique(context.Background(), unavailable, true, time.Millisecond, logr.Discard()); !errors.Is(err, nvml.ErrNVMLUnavailable) {
		t.Errorf("NVML unavailable: err=%v, want ErrNVMLUnavailable", err)
	}
	if id, err := DiscoverClique(context.Background(), failed, false, time.Millisecond, logr.Discard()); err != nil || id != "" {
		t.Errorf("failed fabric, gate off: id=%q err=%v, want a node without fabric (empty clique)", id, err)
	}
	for name, d := range map[string]nvml.Discoverer{"registration in progress": notReady} {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err := DiscoverClique(ctx, d, false, time.Millisecond, logr.Discard())
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: err=%v, want retries until the context ends", name, err)
		}
	}
}

// discoverer answers with fixed GPU readings, derived the way every backend derives them.
type discoverer struct {
	gpus []nvml.GPU
	err  error
}

func (d discoverer) Discover(context.Context) (nvml.Result, error) {
	if d.err != nil {
		return nvml.Result{}, d.err
	}
	id, err := nvml.DeriveCliqueID(d.gpus)
	return nvml.Result{GPUs: d.gpus, CliqueID: id}, err
}
