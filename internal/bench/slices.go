package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/sim/controlplane"
)

// Figures of the slice benchmark's wait for the scheduler (see settled) and its progress lines.
const (
	// sliceSettleWindow is how long the scheduler's resident memory and heap in use must each
	// stay within sliceSettleTolerance of their largest value (or sliceSettleFloor, whichever is
	// more: a small heap moves by a few MiB with every scrape of its metrics) for it to count
	// as caught up.
	sliceSettleWindow    = 10 * time.Second
	sliceSettleTolerance = 0.02
	sliceSettleFloor     = 4 << 20
	sliceSampleEvery     = time.Second
	// sliceGCWait bounds the wait, once caught up, for each component's next GC: its live heap
	// then includes every object. Go forces a GC at least every 2 minutes.
	sliceGCWait        = 150 * time.Second
	sliceGCPollEvery   = 2 * time.Second
	sliceProgressEvery = 5 * time.Second
	// sliceIndexMinLength is the resourceslice controller's resourceSliceIndexMinLength: the
	// fewest hex digits of the index that starts each slice's generateName.
	sliceIndexMinLength = 5
)

// SlicesOptions configure the slice benchmark.
type SlicesOptions struct {
	// Nodes is how many Nodes, each with its plugin's ResourceSlices, are created per count.
	Nodes int
	// NumChannels are the counts of channels per node to measure, one run each.
	NumChannels []int
	// SettleTimeout is the longest wait for the scheduler to catch up after the objects are
	// created; figures taken then are reported as not settled.
	SettleTimeout time.Duration
	// MaxRSSGiB stops creation once the started control plane's processes use more resident
	// memory, so that a load too large for the machine ends as a smaller one; zero: no limit.
	MaxRSSGiB float64
	// Progress receives progress lines; nil discards.
	Progress io.Writer
}

// ParseChannelCounts reads --num-channels: whole numbers separated by commas. The range is
// checked by Validate.
func ParseChannelCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("--num-channels %q: %q is not a whole number", s, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// Validate checks the options and names the first bad value.
func (o *SlicesOptions) Validate() error {
	if o.Nodes < 1 {
		return fmt.Errorf("--nodes must be at least 1, got %d", o.Nodes)
	}
	if len(o.NumChannels) == 0 {
		return errors.New("--num-channels needs at least one count")
	}
	seen := map[int]bool{}
	for _, c := range o.NumChannels {
		if c < 1 || c > kubeletplugin.MaxChannels {
			return fmt.Errorf("--num-channels: %d is not between 1 and %d", c, kubeletplugin.MaxChannels)
		}
		if seen[c] {
			return fmt.Errorf("--num-channels: %d is given twice", c)
		}
		seen[c] = true
	}
	if o.MaxRSSGiB < 0 {
		return fmt.Errorf("--max-rss-gib must not be negative, got %g", o.MaxRSSGiB)
	}
	if o.SettleTimeout < sliceSettleWindow {
		return fmt.Errorf("--settle-timeout must be at least %s, got %s", sliceSettleWindow, o.SettleTimeout)
	}
	return nil
}

// SliceCluster is the cluster one count runs on.
type SliceCluster struct {
	Config *rest.Config
	// Processes are the control plane's processes when the benchmark started it (their memory
	// is read from /proc and the scheduler's /metrics); empty for a cluster it was given.
	Processes []controlplane.Process
	// Shared: the cluster serves every count, so each count's objects are deleted once measured.
	Shared bool
	// Stop stops what the benchmark started; nil: nothing to stop.
	Stop func() error
}

// SliceClusterFunc returns the cluster for the next count.
type SliceClusterFunc func(ctx context.Context) (*SliceCluster, error)

// ExistingCluster runs every count on the cluster at cfg.
func ExistingCluster(cfg *rest.Config) SliceClusterFunc {
	return func(context.Context) (*SliceCluster, error) { return &SliceCluster{Config: cfg, Shared: true}, nil }
}

// FreshControlPlanes starts, for each count, its own etcd, kube-apiserver and kube-scheduler
// from binDir in a new temporary directory, removed again by Stop.
func FreshControlPlanes(binDir string, progress io.Writer) SliceClusterFunc {
	return func(ctx context.Context) (*SliceCluster, error) {
		dir, err := os.MkdirTemp("", "cdplane-bench-slices-")
		if err != nil {
			return nil, fmt.Errorf("creating the control plane's directory: %w", err)
		}
		fmt.Fprintln(progress, "== starting etcd, kube-apiserver and kube-scheduler")
		cp, err := controlplane.Start(ctx, controlplane.Options{Dir: dir, BinDir: binDir, Scheduler: true,
			// The apiserver polls etcd's size and its object counts; the defaults (30 s, 1 min) lag
			// the figures.
			APIServerArgs: map[string][]string{"etcd-db-metric-poll-interval": {"5s"}, "etcd-count-metric-poll-period": {"5s"}}})
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		stop := func() error {
			if err := cp.Stop(15 * time.Second); err != nil {
				return fmt.Errorf("stopping the control plane (left in %s): %w", dir, err)
			}
			return os.RemoveAll(dir)
		}
		cfg, err := cp.AdminConfig()
		if err != nil {
			return nil, errors.Join(err, stop())
		}
		return &SliceCluster{Config: cfg, Processes: cp.Processes, Stop: stop}, nil
	}
}

// MemoryFigures is one component's memory.
type MemoryFigures struct {
	// RSSBytes is VmRSS from /proc, or process_resident_memory_bytes from the component's
	// metrics where its process is not known.
	RSSBytes uint64 `json:"rss_bytes"`
	// HeapInuseBytes is go_memstats_heap_inuse_bytes from its /metrics: live objects and
	// garbage not yet collected.
	HeapInuseBytes uint64 `json:"heap_inuse_bytes"`
	// HeapLiveBytes is go_gc_heap_live_bytes: the heap the last GC found live.
	HeapLiveBytes uint64 `json:"heap_live_bytes"`
	// GCCycles is go_gc_cycles_total_gc_cycles_total.
	GCCycles uint64 `json:"-"`
}

// ComponentMemory is a component's memory on the empty cluster and once the scheduler caught up.
type ComponentMemory struct {
	Before MemoryFigures `json:"before"`
	After  MemoryFigures `json:"after"`
	// HeapLiveAfterGCBytes is the live heap of the component's first GC after the scheduler
	// caught up; zero when none completed within sliceGCWait.
	HeapLiveAfterGCBytes uint64 `json:"heap_live_after_gc_bytes"`
}

// SlicesResult is one count's figures.
type SlicesResult struct {
	NumChannels    int `json:"num_channels"`
	DevicesPerNode int `json:"devices_per_node"`
	SlicesPerNode  int `json:"slices_per_node"`
	NodesRequested int `json:"nodes_requested"`
	// NodesCreated counts the nodes whose every slice was created.
	NodesCreated  int   `json:"nodes_created"`
	SlicesCreated int64 `json:"slices_created"`
	// StoredSlices is the count of ResourceSlices the apiserver lists (every driver's).
	StoredSlices    int64   `json:"stored_slices"`
	CreateSeconds   float64 `json:"create_seconds"`
	ObjectsPerSec   float64 `json:"objects_per_second"`
	SlicesJSONBytes int64   `json:"slices_request_json_bytes"`
	// SlicesStoredBytes is the protobuf size of the slices as the apiserver returned them
	// (managed fields included): what etcd holds, less a few bytes of envelope each.
	SlicesStoredBytes int64 `json:"slices_stored_proto_bytes"`
	// StorageObjects is apiserver_resource_objects (before Kubernetes 1.34
	// apiserver_storage_objects) of resourceslices, StorageEstimateBytes
	// apiserver_resource_size_estimate_bytes of resourceslices (the apiserver's estimate of
	// their stored size), StorageSizeBytes apiserver_storage_size_bytes (etcd's database
	// file); nil where the apiserver has none.
	StorageObjects       *float64        `json:"apiserver_resource_objects,omitempty"`
	StorageEstimateBytes *float64        `json:"apiserver_resource_size_estimate_bytes,omitempty"`
	StorageSizeBytes     *float64        `json:"apiserver_storage_size_bytes,omitempty"`
	APIServer            ComponentMemory `json:"kube_apiserver"`
	// Scheduler is nil when the scheduler is not reachable (a cluster given by kubeconfig).
	Scheduler *ComponentMemory `json:"kube_scheduler,omitempty"`
	// Settled: the scheduler's (else the apiserver's) memory was stable for sliceSettleWindow
	// before SettleTimeout; SettleSeconds is the wait after creation ended.
	Settled       bool    `json:"settled"`
	SettleSeconds float64 `json:"settle_seconds"`
	// Error is why creation stopped early; the figures are of what was created.
	Error string `json:"error,omitempty"`
}

// SlicesReport is a whole run.
type SlicesReport struct {
	Nodes int `json:"nodes"`
	// FreshControlPlane: each count ran on its own control plane.
	FreshControlPlane bool           `json:"fresh_control_plane"`
	Runs              []SlicesResult `json:"runs"`
}

// Slices measures, for each count of channels, N nodes with the ResourceSlices the kubelet
// plugin would publish for them, on the cluster clusters returns for that count. A count whose
// creation failed part way is measured and reported with its error, and the next one runs; the
// returned error then names every such count.
func Slices(ctx context.Context, clusters SliceClusterFunc, o SlicesOptions) (*SlicesReport, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	rep := &SlicesReport{Nodes: o.Nodes, FreshControlPlane: true}
	var failed []error
	for _, c := range o.NumChannels {
		cl, err := clusters(ctx)
		if err != nil {
			return rep, fmt.Errorf("%d channels: %w", c, err)
		}
		rep.FreshControlPlane = rep.FreshControlPlane && !cl.Shared
		res, err := runSlices(ctx, cl, c, o)
		if cl.Stop != nil {
			err = errors.Join(err, cl.Stop())
		}
		if err != nil {
			return rep, fmt.Errorf("%d channels: %w", c, err)
		}
		rep.Runs = append(rep.Runs, res)
		if res.Error != "" {
			failed = append(failed, fmt.Errorf("%d channels: creation stopped after %d of %d nodes: %s", c, res.NodesCreated, o.Nodes, res.Error))
		}
	}
	return rep, errors.Join(failed...)
}

// runSlices creates and measures one count's objects on cl.
func runSlices(ctx context.Context, cl *SliceCluster, channels int, o SlicesOptions) (SlicesResult, error) {
	res := SlicesResult{NumChannels: channels, DevicesPerNode: channels + 1, NodesRequested: o.Nodes,
		SlicesPerNode: len(kubeletplugin.SplitSlices(make([]resourcev1.Device, channels+1), kubeletplugin.MaxDevicesPerSlice))}
	c, err := setupClient(cl.Config)
	if err != nil {
		return res, err
	}
	api, sched, err := probes(cl)
	if err != nil {
		return res, err
	}
	if res.APIServer.Before, err = api.read(ctx); err != nil {
		return res, err
	}
	if sched != nil {
		res.Scheduler = &ComponentMemory{}
		if res.Scheduler.Before, err = sched.read(ctx); err != nil {
			return res, err
		}
	}
	prefix := fmt.Sprintf("bench-slices-%d-c%d", time.Now().Unix()%100000, channels)
	if cl.Shared {
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			deleteSliceNodes(cctx, c, prefix, o.Nodes)
		}()
	}
	fmt.Fprintf(o.Progress, "== %d channels: creating %d nodes and %d ResourceSlices\n", channels, o.Nodes, o.Nodes*res.SlicesPerNode)
	load := sliceLoad{prefix: prefix, nodes: o.Nodes, channels: channels, perNode: res.SlicesPerNode, progress: o.Progress}
	if o.MaxRSSGiB > 0 && len(cl.Processes) > 0 {
		load.guard = rssGuard(cl.Processes, o.MaxRSSGiB)
	}
	cr, createErr := createSliceNodes(ctx, c, load)
	res.NodesCreated, res.SlicesCreated = int(cr.nodes.Load()), cr.slices.Load()
	res.SlicesJSONBytes, res.SlicesStoredBytes = cr.jsonBytes.Load(), cr.protoBytes.Load()
	res.CreateSeconds = cr.elapsed.Seconds()
	if res.CreateSeconds > 0 {
		res.ObjectsPerSec = float64(cr.nodes.Load()+cr.slices.Load()) / res.CreateSeconds
	}
	if createErr != nil {
		if ctx.Err() != nil {
			return res, createErr
		}
		res.Error = createErr.Error()
		fmt.Fprintf(o.Progress, "== %d channels: creation stopped: %v; measuring what was created\n", channels, createErr)
	}
	return res, measureSlices(ctx, cl.Config, c, api, sched, o, &res)
}

// measureSlices waits for the scheduler (else the apiserver) to settle, then reads both
// components' memory and the apiserver's storage figures into res.
func measureSlices(ctx context.Context, cfg *rest.Config, c client.Client, api *probe, sched *probe, o SlicesOptions, res *SlicesResult) error {
	watched := sched
	if watched == nil {
		watched = api
	}
	fmt.Fprintf(o.Progress, "== %d channels: waiting for %s's memory to be stable for %s (at most %s)\n", res.NumChannels, watched.name, sliceSettleWindow, o.SettleTimeout)
	start := time.Now()
	last, ok, err := waitSettled(ctx, watched, o.SettleTimeout)
	if err != nil {
		return err
	}
	res.Settled, res.SettleSeconds = ok, time.Since(start).Seconds()
	if sched != nil {
		res.Scheduler.After = last
	}
	if res.APIServer.After, err = api.read(ctx); err != nil {
		return err
	}
	fmt.Fprintf(o.Progress, "== %d channels: waiting for the next GC of each component (at most %s)\n", res.NumChannels, sliceGCWait)
	after := []*ComponentMemory{&res.APIServer}
	ps := []*probe{api}
	if sched != nil {
		after, ps = append(after, res.Scheduler), append(ps, sched)
	}
	if err := waitGC(ctx, ps, after); err != nil {
		return err
	}
	var list resourcev1.ResourceSliceList
	if err := c.List(ctx, &list, client.Limit(1)); err != nil {
		return fmt.Errorf("counting ResourceSlices: %w", err)
	}
	res.StoredSlices = int64(len(list.Items)) + ptr.Deref(list.RemainingItemCount, 0)
	m, err := controlplane.ReadMetrics(ctx, cfg)
	if err != nil {
		return err
	}
	slices := map[string]string{"group": resourcev1.GroupName, "resource": "resourceslices"}
	if _, ok := m["apiserver_resource_objects"]; ok {
		res.StorageObjects = ptr.To(m.Sum("apiserver_resource_objects", slices))
	} else if _, ok := m["apiserver_storage_objects"]; ok {
		res.StorageObjects = ptr.To(m.Sum("apiserver_storage_objects", map[string]string{"resource": "resourceslices." + resourcev1.GroupName}))
	}
	if _, ok := m["apiserver_resource_size_estimate_bytes"]; ok {
		res.StorageEstimateBytes = ptr.To(m.Sum("apiserver_resource_size_estimate_bytes", slices))
	}
	if _, ok := m["apiserver_storage_size_bytes"]; ok {
		res.StorageSizeBytes = ptr.To(m.Sum("apiserver_storage_size_bytes", nil))
	}
	return nil
}

// waitSettled samples p every sliceSampleEvery until settled or timeout, and returns the last
// sample and whether it settled.
func waitSettled(ctx context.Context, p *probe, timeout time.Duration) (MemoryFigures, bool, error) {
	deadline := time.Now().Add(timeout)
	var samples []memSample
	for {
		m, err := p.read(ctx)
		if err != nil {
			return MemoryFigures{}, false, err
		}
		samples = append(samples, memSample{at: time.Now(), mem: m})
		if settled(samples, sliceSettleWindow, sliceSettleTolerance, sliceSettleFloor) {
			return m, true, nil
		}
		if time.Now().After(deadline) {
			return m, false, nil
		}
		select {
		case <-ctx.Done():
			return MemoryFigures{}, false, ctx.Err()
		case <-time.After(sliceSampleEvery):
		}
	}
}

type memSample struct {
	at  time.Time
	mem MemoryFigures
}

// settled reports whether samples (oldest first) reach back at least window from the last one
// and, over the samples within that window, RSS and heap in use each varied by at most tol of
// their largest value there or by floor bytes, whichever is more.
func settled(samples []memSample, window time.Duration, tol float64, floor uint64) bool {
	if len(samples) < 2 {
		return false
	}
	last := samples[len(samples)-1].at
	from := last.Add(-window)
	if samples[0].at.After(from) {
		return false
	}
	var in []memSample
	for _, s := range samples {
		if !s.at.Before(from) {
			in = append(in, s)
		}
	}
	steady := func(get func(MemoryFigures) uint64) bool {
		lo, hi := get(in[0].mem), get(in[0].mem)
		for _, s := range in[1:] {
			lo, hi = min(lo, get(s.mem)), max(hi, get(s.mem))
		}
		return hi-lo <= floor || float64(hi-lo) <= tol*float64(hi)
	}
	return steady(func(m MemoryFigures) uint64 { return m.RSSBytes }) && steady(func(m MemoryFigures) uint64 { return m.HeapInuseBytes })
}

// waitGC polls each component until its GC count passes the one in its After figures and
// records the live heap that GC found, for at most sliceGCWait.
func waitGC(ctx context.Context, ps []*probe, mems []*ComponentMemory) error {
	deadline := time.Now().Add(sliceGCWait)
	for {
		pending := 0
		for i, p := range ps {
			if mems[i].HeapLiveAfterGCBytes != 0 {
				continue
			}
			m, err := p.read(ctx)
			if err != nil {
				return err
			}
			if m.GCCycles > mems[i].After.GCCycles {
				mems[i].HeapLiveAfterGCBytes = m.HeapLiveBytes
			} else {
				pending++
			}
		}
		if pending == 0 || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(sliceGCPollEvery):
		}
	}
}

// creation counts what createSliceNodes created.
type creation struct {
	nodes, slices         atomic.Int64
	jsonBytes, protoBytes atomic.Int64
	elapsed               time.Duration
}

// sliceLoad is one count's objects: nodes named prefix-NNNNN with channels channels each.
type sliceLoad struct {
	prefix                   string
	nodes, channels, perNode int
	progress                 io.Writer
	// guard, when set, is called every second; its error stops creation.
	guard func() error
}

// createSliceNodes creates the nodes, each followed by its slices, on setupWorkers workers,
// with a progress line every sliceProgressEvery. It stops at the first error.
func createSliceNodes(ctx context.Context, c client.Client, l sliceLoad) (*creation, error) {
	cr := &creation{}
	var stop atomic.Pointer[error]
	start := time.Now()
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for tick := 1; ; tick++ {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if l.guard != nil && stop.Load() == nil {
				if err := l.guard(); err != nil {
					stop.Store(&err)
				}
			}
			if tick%int(sliceProgressEvery/time.Second) == 0 {
				s := cr.slices.Load()
				fmt.Fprintf(l.progress, "   %d/%d nodes, %d/%d slices, %.0f objects/s\n", cr.nodes.Load(), l.nodes, s, int64(l.nodes*l.perNode),
					float64(cr.nodes.Load()+s)/time.Since(start).Seconds())
			}
		}
	}()
	create := func(obj client.Object) error {
		if err := stop.Load(); err != nil {
			return *err
		}
		return c.Create(ctx, obj)
	}
	err := parallel(l.nodes, setupWorkers, func(i int) error {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%05d", l.prefix, i), Labels: map[string]string{benchEnvLabel: l.prefix}}}
		if err := create(node); err != nil {
			return fmt.Errorf("creating node %s: %w", node.Name, err)
		}
		for _, s := range nodeSlices(node, l.channels) {
			raw, err := json.Marshal(s)
			if err != nil {
				return err
			}
			if err := create(s); err != nil {
				return fmt.Errorf("creating a ResourceSlice of node %s: %w", node.Name, err)
			}
			cr.slices.Add(1)
			cr.jsonBytes.Add(int64(len(raw)))
			cr.protoBytes.Add(int64(s.Size()))
		}
		cr.nodes.Add(1)
		return nil
	})
	cr.elapsed = time.Since(start)
	return cr, err
}

// rssGuard fails once the resident memory of procs adds up to more than limitGiB.
func rssGuard(procs []controlplane.Process, limitGiB float64) func() error {
	return func() error {
		var sum uint64
		for _, p := range procs {
			if rss, err := controlplane.ResidentMemory(p.PID); err == nil {
				sum += rss
			}
		}
		if gib := float64(sum) / (1 << 30); gib > limitGiB {
			return fmt.Errorf("etcd, kube-apiserver and kube-scheduler use %.1f GiB, over --max-rss-gib %g", gib, limitGiB)
		}
		return nil
	}
}

// nodeSlices returns the ResourceSlices the kubelet plugin's DRA helper (the resourceslice
// controller, owner the Node) creates for node on first publication of numChannels channels
// and the daemon device: generateName <index>-<driver>-<node>-, the node's pool at generation 1.
func nodeSlices(node *corev1.Node, numChannels int) []*resourcev1.ResourceSlice {
	pool := kubeletplugin.NodeResources(node.Name, numChannels, "", true).Pools[node.Name]
	indexLen := max(sliceIndexMinLength, len(strconv.FormatInt(int64(len(pool.Slices)-1), 16)))
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: ptr.To(true)}
	out := make([]*resourcev1.ResourceSlice, 0, len(pool.Slices))
	for i, s := range pool.Slices {
		out = append(out, &resourcev1.ResourceSlice{
			TypeMeta: metav1.TypeMeta{APIVersion: resourcev1.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
			ObjectMeta: metav1.ObjectMeta{
				GenerateName:    fmt.Sprintf("%0*x-%s-%s-", indexLen, i, cdv1beta1.DriverName, node.Name),
				OwnerReferences: []metav1.OwnerReference{owner},
			},
			Spec: resourcev1.ResourceSliceSpec{
				Driver:                 cdv1beta1.DriverName,
				Pool:                   resourcev1.ResourcePool{Name: node.Name, Generation: 1, ResourceSliceCount: int64(len(pool.Slices))},
				NodeName:               ptr.To(node.Name),
				NodeSelector:           pool.NodeSelector,
				Devices:                s.Devices,
				SharedCounters:         s.SharedCounters,
				PerDeviceNodeSelection: s.PerDeviceNodeSelection,
				PartitionTypeAttribute: s.PartitionTypeAttribute,
				SkipNodeOperations:     s.SkipNodeOperations,
			},
		})
	}
	return out
}

// deleteSliceNodes deletes a shared cluster's benchmark nodes and their slices.
func deleteSliceNodes(ctx context.Context, c client.Client, prefix string, n int) {
	_ = parallel(n, setupWorkers, func(i int) error {
		node := fmt.Sprintf("%s-%05d", prefix, i)
		_ = c.DeleteAllOf(ctx, &resourcev1.ResourceSlice{}, client.MatchingFieldsSelector{
			Selector: fields.OneTermEqualSelector(resourcev1.ResourceSliceSelectorNodeName, node)})
		return nil
	})
	_ = c.DeleteAllOf(ctx, &corev1.Node{}, client.MatchingLabels{benchEnvLabel: prefix})
}

// probe reads one component's memory.
type probe struct {
	name string
	// pid of its process; zero: unknown, RSS from its metrics.
	pid     int
	metrics func(ctx context.Context) (controlplane.Metrics, error)
}

// probes returns the apiserver's and, when the benchmark started it, the scheduler's probe.
func probes(cl *SliceCluster) (*probe, *probe, error) {
	api := &probe{name: "kube-apiserver", metrics: func(ctx context.Context) (controlplane.Metrics, error) {
		return controlplane.ReadMetrics(ctx, cl.Config)
	}}
	var sched *probe
	for _, p := range cl.Processes {
		switch p.Name {
		case "kube-apiserver":
			api.pid = p.PID
		case "kube-scheduler":
			cm, err := controlplane.NewComponentMetrics(cl.Config, p)
			if err != nil {
				return nil, nil, err
			}
			sched = &probe{name: p.Name, pid: p.PID, metrics: cm.Read}
		}
	}
	return api, sched, nil
}

func (p *probe) read(ctx context.Context) (MemoryFigures, error) {
	m, err := p.metrics(ctx)
	if err != nil {
		return MemoryFigures{}, fmt.Errorf("reading %s's metrics: %w", p.name, err)
	}
	mem := MemoryFigures{
		HeapInuseBytes: uint64(m.Sum("go_memstats_heap_inuse_bytes", nil)),
		HeapLiveBytes:  uint64(m.Sum("go_gc_heap_live_bytes", nil)),
		GCCycles:       uint64(m.Sum("go_gc_cycles_total_gc_cycles_total", nil)),
	}
	if p.pid == 0 {
		mem.RSSBytes = uint64(m.Sum("process_resident_memory_bytes", nil))
		return mem, nil
	}
	if mem.RSSBytes, err = controlplane.ResidentMemory(p.pid); err != nil {
		return MemoryFigures{}, fmt.Errorf("reading %s's resident memory: %w", p.name, err)
	}
	return mem, nil
}
