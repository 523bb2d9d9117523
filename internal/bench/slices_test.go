package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/sim/controlplane"
)

// TestNodeSlices checks that the benchmark creates exactly what the plugin publishes: the
// devices of NodeResources in the same slices, each named, owned and pooled as the DRA helper
// makes it.
func TestNodeSlices(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-7", UID: "uid-7"}}
	cases := map[string]struct {
		channels   int
		wantSlices int
	}{
		"one channel and the daemon in one slice": {channels: 1, wantSlices: 1},
		"127 channels and the daemon fill one":    {channels: 127, wantSlices: 1},
		"128 channels put the daemon in a second": {channels: 128, wantSlices: 2},
		"every channel": {channels: 2048, wantSlices: 17},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := nodeSlices(node, tc.channels)
			if len(got) != tc.wantSlices {
				t.Fatalf("%d slices, want %d", len(got), tc.wantSlices)
			}
			plugin := kubeletplugin.NodeResources(node.Name, tc.channels, "", true).Pools[node.Name].Slices
			if len(plugin) != len(got) {
				t.Fatalf("%d slices, the plugin publishes %d", len(got), len(plugin))
			}
			var all []resourcev1.Device
			for i, s := range got {
				if diff := cmp.Diff(plugin[i].Devices, s.Spec.Devices); diff != "" {
					t.Errorf("slice %d devices differ from the plugin's (-plugin +bench):\n%s", i, diff)
				}
				all = append(all, s.Spec.Devices...)
				wantSpec := resourcev1.ResourceSliceSpec{
					Driver:   cdv1beta1.DriverName,
					Pool:     resourcev1.ResourcePool{Name: "node-7", Generation: 1, ResourceSliceCount: int64(tc.wantSlices)},
					NodeName: ptr.To("node-7"),
					Devices:  s.Spec.Devices,
				}
				if diff := cmp.Diff(wantSpec, s.Spec); diff != "" {
					t.Errorf("slice %d spec (-want +got):\n%s", i, diff)
				}
				wantMeta := metav1.ObjectMeta{
					GenerateName:    fmt.Sprintf("%05x-compute-domain.nvidia.com-node-7-", i),
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "node-7", UID: "uid-7", Controller: ptr.To(true)}},
				}
				if diff := cmp.Diff(wantMeta, s.ObjectMeta); diff != "" {
					t.Errorf("slice %d metadata (-want +got):\n%s", i, diff)
				}
			}
			if diff := cmp.Diff(kubeletplugin.Devices(tc.channels, "", true), all); diff != "" {
				t.Errorf("devices across the slices (-plugin +bench):\n%s", diff)
			}
			if last := all[len(all)-1].Name; last != kubeletplugin.DaemonDeviceName {
				t.Errorf("the last device is %s, want the daemon device", last)
			}
		})
	}
}

func TestSlicesOptions(t *testing.T) {
	cases := map[string]struct {
		channels string
		nodes    int
		settle   time.Duration
		maxRSS   float64
		wantErr  string // a substring; empty: valid
	}{
		"two counts":              {channels: "2048,8", nodes: 3, settle: time.Minute},
		"spaces around counts":    {channels: " 2048 , 1", nodes: 3, settle: time.Minute},
		"not a number":            {channels: "2048,abc", nodes: 3, settle: time.Minute, wantErr: `"abc" is not a whole number`},
		"empty count":             {channels: "2048,,8", nodes: 3, settle: time.Minute, wantErr: `"" is not a whole number`},
		"empty list":              {channels: "", nodes: 3, settle: time.Minute, wantErr: `"" is not a whole number`},
		"zero channels":           {channels: "0", nodes: 3, settle: time.Minute, wantErr: "--num-channels: 0 is not between 1 and 2048"},
		"more than a node has":    {channels: "8,2049", nodes: 3, settle: time.Minute, wantErr: "--num-channels: 2049 is not between 1 and 2048"},
		"a count twice":           {channels: "8,2048,8", nodes: 3, settle: time.Minute, wantErr: "--num-channels: 8 is given twice"},
		"no nodes":                {channels: "8", nodes: 0, settle: time.Minute, wantErr: "--nodes must be at least 1, got 0"},
		"settle below the window": {channels: "8", nodes: 3, settle: 5 * time.Second, wantErr: "--settle-timeout must be at least 10s, got 5s"},
		"a memory limit":          {channels: "8", nodes: 3, settle: time.Minute, maxRSS: 1.5},
		"a negative memory limit": {channels: "8", nodes: 3, settle: time.Minute, maxRSS: -2, wantErr: "--max-rss-gib must not be negative, got -2"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			counts, err := ParseChannelCounts(tc.channels)
			if err == nil {
				o := SlicesOptions{Nodes: tc.nodes, NumChannels: counts, SettleTimeout: tc.settle, MaxRSSGiB: tc.maxRSS}
				err = o.Validate()
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestSettled(t *testing.T) {
	t0 := time.Unix(1000, 0)
	series := func(step time.Duration, figures ...uint64) []memSample {
		var out []memSample
		for i, f := range figures {
			out = append(out, memSample{at: t0.Add(time.Duration(i) * step), mem: MemoryFigures{RSSBytes: f, HeapInuseBytes: f / 2}})
		}
		return out
	}
	cases := map[string]struct {
		samples []memSample
		want    bool
	}{
		"too short a history":      {samples: series(time.Second, 100, 100, 100), want: false},
		"flat for the window":      {samples: series(time.Second, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100), want: true},
		"growing":                  {samples: series(time.Second, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150), want: false},
		"grew, then flat 10 s":     {samples: series(time.Second, 10, 20, 30, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1010), want: true},
		"a jump inside the window": {samples: series(time.Second, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1100), want: false},
		"within 2%":                {samples: series(2*time.Second, 1000, 995, 1010, 1000, 992, 1005), want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := settled(tc.samples, 10*time.Second, 0.02, 0); got != tc.want {
				t.Errorf("settled = %v, want %v", got, tc.want)
			}
		})
	}
	// 3% apart is too much.
	if settled(series(2*time.Second, 1000, 1000, 1030, 1000, 1000, 1000), 10*time.Second, 0.02, 0) {
		t.Error("settled with 3% between samples")
	}
	// A small heap may move by the floor.
	small := series(2*time.Second, 20<<20, 23<<20, 21<<20, 20<<20, 24<<20, 22<<20)
	if !settled(small, 10*time.Second, 0.02, 4<<20) {
		t.Error("not settled with a 20 MiB heap moving by 4 MiB, within the floor")
	}
	if settled(small, 10*time.Second, 0.02, 2<<20) {
		t.Error("settled with a 20 MiB heap moving by 4 MiB, over a 2 MiB floor")
	}
	// Heap in use alone moving keeps it unsettled.
	s := series(time.Second, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100)
	s[len(s)-1].mem.HeapInuseBytes = 80
	if settled(s, 10*time.Second, 0.02, 0) {
		t.Error("settled while heap in use dropped by a third")
	}
}

// controlPlanes returns fresh control planes from $CDPLANE_K8S_BINS (the test is skipped
// without it), and checks at the end of the test that none of their processes still runs.
func controlPlanes(t *testing.T) SliceClusterFunc {
	binDir := os.Getenv(controlplane.BinDirEnv)
	if binDir == "" {
		t.Skipf("$%s is not set: run with %s=$(hack/k8s-bins.sh | tail -n1)", controlplane.BinDirEnv, controlplane.BinDirEnv)
	}
	ctrllog.SetLogger(logr.Discard())
	var started []controlplane.Process
	t.Cleanup(func() {
		for _, p := range started {
			if controlplane.Alive(p) {
				t.Errorf("%s (pid %d) still runs", p.Name, p.PID)
				_ = controlplane.Stop([]controlplane.Process{p}, time.Second)
			}
		}
	})
	fresh := FreshControlPlanes(binDir, t.Output())
	return func(ctx context.Context) (*SliceCluster, error) {
		cl, err := fresh(ctx)
		if err == nil {
			started = append(started, cl.Processes...)
		}
		return cl, err
	}
}

// TestSlicesOnControlPlanes runs the benchmark on 3 nodes with 2048 and 8 channels, each on its
// own control plane, and checks the counts, that memory was read from every component, and that
// no process is left. It needs the binaries of hack/k8s-bins.sh in $CDPLANE_K8S_BINS.
func TestSlicesOnControlPlanes(t *testing.T) {
	clusters := controlPlanes(t)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	rep, err := Slices(ctx, clusters, SlicesOptions{Nodes: 3, NumChannels: []int{2048, 8}, SettleTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.FreshControlPlane {
		t.Error("the counts shared a control plane")
	}
	if len(rep.Runs) != 2 {
		t.Fatalf("%d runs, want 2", len(rep.Runs))
	}
	for i, want := range []struct{ channels, slices int }{{2048, 3 * 17}, {8, 3}} {
		r := rep.Runs[i]
		if r.NumChannels != want.channels || r.NodesCreated != 3 || r.SlicesCreated != int64(want.slices) || r.StoredSlices != int64(want.slices) || r.Error != "" {
			t.Errorf("run %d: %d channels, %d nodes, %d slices created, %d stored, error %q; want %d channels, 3 nodes, %d slices",
				i, r.NumChannels, r.NodesCreated, r.SlicesCreated, r.StoredSlices, r.Error, want.channels, want.slices)
		}
		if r.Scheduler == nil {
			t.Fatalf("run %d: the scheduler was not measured", i)
		}
		for name, m := range map[string]*ComponentMemory{"kube-apiserver": &r.APIServer, "kube-scheduler": r.Scheduler} {
			if m.After.RSSBytes == 0 || m.After.HeapInuseBytes == 0 || m.HeapLiveAfterGCBytes == 0 {
				t.Errorf("run %d: %s's memory not read: %+v", i, name, m)
			}
		}
		if r.SlicesJSONBytes <= 0 || r.SlicesStoredBytes <= 0 {
			t.Errorf("run %d: slice sizes %d JSON, %d stored", i, r.SlicesJSONBytes, r.SlicesStoredBytes)
		}
	}
	if a, b := rep.Runs[0].SlicesStoredBytes, rep.Runs[1].SlicesStoredBytes; a < 100*b {
		t.Errorf("2048 channels stored %d bytes, 8 channels %d: want far more for 2048", a, b)
	}
}

func TestRSSGuard(t *testing.T) {
	self := []controlplane.Process{{Name: "test", PID: os.Getpid()}}
	if err := rssGuard(self, 1000)(); err != nil {
		t.Errorf("this test uses over 1000 GiB: %v", err)
	}
	err := rssGuard(self, 0.001)()
	if err == nil || !strings.Contains(err.Error(), "over --max-rss-gib 0.001") {
		t.Errorf("error %v, want one naming --max-rss-gib 0.001", err)
	}
}

// TestSlicesStopsAtMemoryLimit checks that a load the memory limit stops is still measured:
// the run reports the nodes created, the limit as its error, and figures for what is there.
func TestSlicesStopsAtMemoryLimit(t *testing.T) {
	clusters := controlPlanes(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	// The control plane alone uses more than 0.05 GiB: creation stops within its first second.
	rep, err := Slices(ctx, clusters, SlicesOptions{Nodes: 2000, NumChannels: []int{8}, SettleTimeout: time.Minute, MaxRSSGiB: 0.05})
	if err == nil || !strings.Contains(err.Error(), "8 channels: creation stopped after") || !strings.Contains(err.Error(), "over --max-rss-gib 0.05") {
		t.Fatalf("error %v, want the count's creation stopped by --max-rss-gib", err)
	}
	if rep == nil || len(rep.Runs) != 1 {
		t.Fatalf("report %+v, want one run", rep)
	}
	r := rep.Runs[0]
	if r.NodesCreated >= 2000 || r.Error == "" {
		t.Errorf("%d of 2000 nodes created, error %q: want creation stopped early", r.NodesCreated, r.Error)
	}
	if r.StoredSlices != r.SlicesCreated || r.SlicesCreated < int64(r.NodesCreated) {
		t.Errorf("%d slices created, %d stored, %d nodes complete", r.SlicesCreated, r.StoredSlices, r.NodesCreated)
	}
	if r.Scheduler == nil || r.Scheduler.After.RSSBytes == 0 || r.APIServer.After.RSSBytes == 0 {
		t.Errorf("what was created was not measured: %+v", r)
	}
}
