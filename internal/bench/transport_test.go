package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"cdplane/internal/sim/controlplane"
)

// TestInstancesShareConnections: a burst of instances, each its own identity, opening watches
// that stay open and then making a request each, reaches the apiserver over a few shared HTTP/2
// connections, not one dialled (and TLS-handshaken) per request that found every connection
// full: through client-go's net/http transport, a large burst spent a large share of the
// benchmark process's CPU and of kube-apiserver's on such handshakes. Counted at a TCP relay in
// front of a real kube-apiserver.
func TestInstancesShareConnections(t *testing.T) {
	binDir := controlPlaneBins(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: t.TempDir(), BinDir: binDir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := cp.Stop(15 * time.Second); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	}()
	admin, err := cp.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	base, conns := relayed(t, admin)
	shared, err := sharedTransport(base)
	if err != nil {
		t.Fatal(err)
	}
	defer closeSharedTransport(base)

	// More watches than one connection carries, all at once, then a GET from each instance
	// while they stay open.
	const instances = 1500
	wctx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	var opened sync.WaitGroup
	errs := make(chan error, instances)
	for i := range instances {
		opened.Go(func() {
			user := fmt.Sprintf("bench-instance-%d", i)
			c, err := newClient(onTransport(identity(base, user, []string{"system:masters"}, 50, 100, nil), shared))
			if err != nil {
				errs <- err
				return
			}
			w, err := c.Watch(wctx, &corev1.ConfigMapList{}, &client.ListOptions{Namespace: "default"})
			if err != nil {
				errs <- err
				return
			}
			context.AfterFunc(wctx, w.Stop)
			if err := c.Get(ctx, client.ObjectKey{Name: "default"}, &corev1.Namespace{}); err != nil {
				errs <- err
			}
		})
	}
	opened.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("an instance's request failed: %v", err)
	}
	// A connection per hundred or so streams, not one per request (through client-go's
	// transport, the same burst opened about one connection per instance here).
	t.Logf("%d instances, each a watch and a GET: %d connections", instances, conns.Load())
	if n := conns.Load(); n > instances/20 {
		t.Errorf("%d instances with a watch each opened %d connections; want a few per thousand", instances, n)
	}
}

// relayed returns cfg reaching its apiserver through a TCP relay on the loopback that counts
// the connections it accepts. The apiserver's certificate names 127.0.0.1, whatever the port.
func relayed(t *testing.T, cfg *rest.Config) (*rest.Config, *atomic.Int64) {
	t.Helper()
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var count atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for _, c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			down, err := l.Accept()
			if err != nil {
				return
			}
			count.Add(1)
			up, err := net.Dial("tcp", u.Host)
			if err != nil {
				_ = down.Close()
				continue
			}
			mu.Lock()
			open = append(open, down, up)
			mu.Unlock()
			for _, pair := range [][2]net.Conn{{down, up}, {up, down}} {
				wg.Go(func() {
					_, _ = io.Copy(pair[0], pair[1])
					_ = pair[0].Close()
					_ = pair[1].Close()
				})
			}
		}
	})
	out := rest.CopyConfig(cfg)
	out.Host = "https://" + l.Addr().String()
	return out, &count
}
