package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller"
	"cdplane/internal/controller/computedomain"
	"cdplane/internal/controller/secretmirror"
	"cdplane/internal/plane"
)

// MemoryOptions configure the memory benchmark.
type MemoryOptions struct {
	// Objects is how many Secrets, pods and cliques of the other plane are created (each).
	Objects  int
	Progress io.Writer
}

// MemoryReport gives a plane controller's heap with an empty cluster and with another plane's
// objects present, and, as a control, the heap of the plane that owns those objects.
type MemoryReport struct {
	Objects           int     `json:"objects_per_kind"`
	EmptyHeapBytes    uint64  `json:"empty_heap_bytes"`
	LoadedHeapBytes   uint64  `json:"loaded_heap_bytes"`
	Ratio             float64 `json:"ratio"`
	OwnerHeapBytes    uint64  `json:"owner_heap_bytes"`
	OwnerRatioToEmpty float64 `json:"owner_ratio_to_empty"`
}

const (
	memPlane  = "plane-a"
	memOther  = "plane-b"
	mirrorKey = "cdplane.bench/mirror"
)

// Memory measures plane-a's controller (ComputeDomain controller, cleanup and Secret mirroring,
// in this process) after its caches synced: first on an empty cluster, then with Objects
// Secrets, daemon pods and cliques of plane-b present. Heap is measured after two GCs.
func Memory(ctx context.Context, cfg *rest.Config, o MemoryOptions) (*MemoryReport, error) {
	if o.Objects < 1 {
		return nil, fmt.Errorf("--objects must be at least 1, got %d", o.Objects)
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	c, err := setupClient(cfg)
	if err != nil {
		return nil, err
	}
	ns := map[string]string{}
	for _, p := range []string{memPlane, memOther} {
		for _, kind := range []string{"driver", "ws"} {
			name := fmt.Sprintf("mem-%s-%s", p, kind)
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: plane.Stamp(p, nil)}}); client.IgnoreAlreadyExists(err) != nil {
				return nil, err
			}
			ns[p+"/"+kind] = name
		}
	}
	rep := &MemoryReport{Objects: o.Objects}
	fmt.Fprintln(o.Progress, "== measuring plane-a's controller on an empty cluster")
	if rep.EmptyHeapBytes, err = planeHeap(ctx, cfg, memPlane, ns[memPlane+"/driver"]); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Progress, "== creating %d Secrets, %d daemon pods and %d cliques of plane-b\n", o.Objects, o.Objects, o.Objects)
	if err := createForeign(ctx, c, o.Objects, ns[memOther+"/ws"], ns[memOther+"/driver"]); err != nil {
		return nil, err
	}
	fmt.Fprintln(o.Progress, "== measuring plane-a's controller with plane-b's objects present")
	if rep.LoadedHeapBytes, err = planeHeap(ctx, cfg, memPlane, ns[memPlane+"/driver"]); err != nil {
		return nil, err
	}
	fmt.Fprintln(o.Progress, "== control: plane-b's controller, which caches those objects")
	if rep.OwnerHeapBytes, err = planeHeap(ctx, cfg, memOther, ns[memOther+"/driver"]); err != nil {
		return nil, err
	}
	rep.Ratio = float64(rep.LoadedHeapBytes) / float64(rep.EmptyHeapBytes)
	rep.OwnerRatioToEmpty = float64(rep.OwnerHeapBytes) / float64(rep.EmptyHeapBytes)
	return rep, nil
}

// createForeign creates n Secrets in plane-b's namespace (mirror copies and plain ones), n
// daemon pods and n cliques in plane-b's driver namespace, all labelled for plane-b.
func createForeign(ctx context.Context, c client.Client, n int, ws, driver string) error {
	uid := "00000000-0000-4000-8000-00000000bbbb"
	return parallel(n, setupWorkers, func(i int) error {
		l := plane.Stamp(memOther, map[string]string{cdv1beta1.ComputeDomainLabel: uid, "app.kubernetes.io/managed-by": "cdplane"})
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%05d", i), Namespace: ws,
				Labels: plane.Stamp(memOther, map[string]string{secretmirror.MirroredFromLabel: driver, mirrorKey: "true"})},
			Data: map[string][]byte{"token": make([]byte, 256)},
		}
		if err := client.IgnoreAlreadyExists(c.Create(ctx, secret)); err != nil {
			return fmt.Errorf("creating Secret: %w", err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("daemon-%05d", i), Namespace: driver, Labels: l},
			Spec:       corev1.PodSpec{NodeName: fmt.Sprintf("node-%05d", i), Containers: []corev1.Container{{Name: "d", Image: "cdplane:bench"}}},
		}
		if err := client.IgnoreAlreadyExists(c.Create(ctx, pod)); err != nil {
			return fmt.Errorf("creating pod: %w", err)
		}
		clique := &cdv1beta1.ComputeDomainClique{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.c-%05d", uid, i), Namespace: driver, Labels: l},
			Daemons:    []cdv1beta1.ComputeDomainDaemonInfo{{NodeName: fmt.Sprintf("node-%05d", i), IPAddress: "127.0.0.1", CliqueID: "c", Index: 0, Status: "Ready"}},
		}
		return client.IgnoreAlreadyExists(c.Create(ctx, clique))
	})
}

// planeHeap runs a plane's controller manager until its caches synced and returns the heap in
// use after two GCs.
func planeHeap(ctx context.Context, cfg *rest.Config, id, driverNS string) (uint64, error) {
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sel, _ := labels.Parse(mirrorKey + "=true")
	mgr, err := controller.NewManager(mctx, cfg, controller.Options{
		Options:            computedomain.Options{DriverNamespace: driverNS, DaemonImage: "cdplane:bench", ControlPlaneID: id},
		SkipNameValidation: true,
		SecretMirror:       secretmirror.Options{SecretSelector: sel},
	})
	if err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(logrInto(mctx)) }()
	syncCtx, syncCancel := context.WithTimeout(ctx, 5*time.Minute)
	defer syncCancel()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		cancel()
		return 0, errors.Join(fmt.Errorf("plane %s: caches did not sync", id), <-done)
	}
	// Informers start when first used: give every controller a moment to register and list.
	time.Sleep(3 * time.Second)
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		cancel()
		return 0, errors.Join(fmt.Errorf("plane %s: caches did not sync", id), <-done)
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	cancel()
	if err := <-done; err != nil {
		return 0, err
	}
	runtime.GC()
	return ms.HeapAlloc, nil
}
