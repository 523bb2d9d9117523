package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/computedomain"
	"cdplane/internal/features"
	"cdplane/internal/scheme"
	"cdplane/internal/testutil"
)

// heldWatches holds back the watch events of chosen resources from the clients built on a
// config it wraps, while it is held: their caches lag the apiserver, as a cache seconds behind a
// busy apiserver does between two passes, with nothing else different. Events already read before
// hold stay delivered; those after it are delivered, in order, on release.
type heldWatches struct {
	resources []string // the resources held, as in their URL path ("computedomaincliques")
	mu        sync.Mutex
	open      chan struct{} // closed while not held
}

func newHeldWatches(resources ...string) *heldWatches {
	h := &heldWatches{resources: resources, open: make(chan struct{})}
	close(h.open)
	return h
}

// hold holds back the resources' watch events until release.
func (h *heldWatches) hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.open = make(chan struct{})
}

// release delivers what was held, and lets events through again.
func (h *heldWatches) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.open:
	default:
		close(h.open)
	}
}

func (h *heldWatches) opened() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open
}

// wrap returns a copy of cfg whose watches of h's resources h holds back.
func (h *heldWatches) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err != nil || req.URL.Query().Get("watch") != "true" || !slices.Contains(h.resources, path.Base(req.URL.Path)) {
				return resp, err
			}
			resp.Body = &heldBody{ReadCloser: resp.Body, h: h, closed: make(chan struct{})}
			return resp, nil
		})
	})
	return cfg
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// heldBody is a watch response whose reads return only while its heldWatches is not held.
type heldBody struct {
	io.ReadCloser
	h      *heldWatches
	once   sync.Once
	closed chan struct{}
}

func (b *heldBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	select {
	case <-b.h.opened():
	case <-b.closed:
	}
	return n, err
}

func (b *heldBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return b.ReadCloser.Close()
}

// laggingReconciler returns a reconciler of e's driver namespace (ComputeDomainCliques set to
// cliques) reading a cache of its own, built on cfg, through the client the controller uses
// (computedomain.NewClient): for tests that make the passes themselves (after e.stopMgr). Every
// kind the reconciler reads is listed once before it returns, so that the cache's informers are
// synced before a test holds their watches.
func (e *env) laggingReconciler(cfg *rest.Config, cliques bool) (*computedomain.Reconciler, client.Client) {
	e.t.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 testCluster.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	testutil.RunManager(e.t, mgr)
	if !mgr.GetCache().WaitForCacheSync(e.ctx()) {
		e.t.Fatal("the cache did not start")
	}
	c, err := computedomain.NewClient(mgr)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, list := range []client.ObjectList{
		&cdv1beta1.ComputeDomainList{}, &cdv1beta1.ComputeDomainCliqueList{}, &corev1.PodList{}, &appsv1.DaemonSetList{},
		&resourcev1.ResourceClaimTemplateList{}, &resourcev1.ResourceClaimList{},
		scheme.MetaList(corev1.SchemeGroupVersion.WithKind("NodeList")),
	} {
		if err := c.List(e.ctx(), list); err != nil {
			e.t.Fatalf("syncing the cache: %v", err)
		}
	}
	return e.reconcilerReading(c, testCluster.Client, cliques), c
}

// waitCached waits until c's cache shows the daemon pod with its IP and its node with the
// domain's label.
func (e *env) waitCached(c client.Client, cd *cdv1beta1.ComputeDomain, pod *corev1.Pod) {
	e.t.Helper()
	e.eventually(time.Minute, "the cache shows the daemon pod and its node", func() (bool, error) {
		p := &corev1.Pod{}
		if err := c.Get(e.ctx(), client.ObjectKeyFromObject(pod), p); err != nil {
			return false, err
		}
		n := scheme.Meta(corev1.SchemeGroupVersion.WithKind("Node"))
		if err := c.Get(e.ctx(), client.ObjectKey{Name: pod.Spec.NodeName}, n); err != nil {
			return false, err
		}
		return p.Status.PodIP != "" && n.Labels[cdv1beta1.ComputeDomainLabel] == string(cd.UID), nil
	})
}

// passHeld runs a pass of r in the background while held is held, checks that it waits (its
// reads wait for the cache to show the writes of the passes before it) for a window, releases
// held and returns the pass's error.
func (e *env) passHeld(r *computedomain.Reconciler, req ctrl.Request, held *heldWatches) error {
	e.t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := r.Reconcile(context.Background(), req)
		done <- err
	}()
	testutil.Consistently(e.t, 2*time.Second, "the pass waits for the cache to show the previous pass's writes", func() (bool, error) {
		select {
		case err := <-done:
			if err != nil {
				return false, fmt.Errorf("the pass ended while the cache had not seen them: %w", err)
			}
			return false, errors.New("the pass ended while the cache had not seen them")
		default:
			return true, nil
		}
	})
	held.release()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		e.t.Fatal("the pass did not end within a minute of the cache catching up")
		return nil
	}
}

// TestIndexesHoldWhileTheCacheLags: a pass whose cache has not yet seen the previous pass's
// writes (its clique, or its status with cliques off) waits for the cache to show them, and keeps
// the indexes that write gave. Without waiting, the controller would take the written entry for
// absent and give index 0 to the joining node whose name sorts first, moving the index of the
// node that had it.
func TestIndexesHoldWhileTheCacheLags(t *testing.T) {
	t.Parallel()
	for _, cliques := range []bool{true, false} {
		t.Run(map[bool]string{true: "cliques", false: "status"}[cliques], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, cliques)
			cd := e.createCD("lagging", 2)
			owner, err := e.daemonSetRef(cd)
			if err != nil {
				t.Fatal(err)
			}
			e.stopMgr() // the reconciler below makes every pass
			held := newHeldWatches("computedomaincliques", "computedomains")
			r, cached := e.laggingReconciler(held.wrap(testCluster.Config), cliques)
			req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: cd.Namespace, Name: cd.Name}}

			late := e.addNode(cd, "zz-late")
			e.waitCached(cached, cd, e.fakeDaemonPod(cd, late, testClique, &owner))
			held.hold()
			if _, err := r.Reconcile(context.Background(), req); err != nil {
				t.Fatalf("first pass: %v", err)
			}
			if got := e.indexOf(cd, cliques, late); got != 0 {
				t.Fatalf("after the first pass %s has index %d, want 0", late, got)
			}

			early := e.addNode(cd, "aa-early") // sorts first
			e.waitCached(cached, cd, e.fakeDaemonPod(cd, early, testClique, &owner))
			if err := e.passHeld(r, req, held); err != nil {
				t.Fatalf("second pass: %v", err)
			}
			if got := e.indexOf(cd, cliques, late); got != 0 {
				t.Errorf("%s's index moved to %d under a lagging cache, want 0", late, got)
			}
			if got := e.indexOf(cd, cliques, early); got != 1 {
				t.Errorf("%s has index %d, want 1", early, got)
			}
		})
	}
}

// reconciler returns a reconciler of e's driver namespace that reads its cache through cache and
// the apiserver through the test cluster's client, with ComputeDomainCliques set to cliques: for
// tests that make the passes themselves (after e.stopMgr).
func (e *env) reconciler(cache client.Client, cliques bool) *computedomain.Reconciler {
	e.t.Helper()
	return e.reconcilerReading(cache, testCluster.Client, cliques)
}

// indexOf reads node's index from the apiserver: its clique's entry (cliques) or the domain's
// status.nodes; -2 when it has none.
func (e *env) indexOf(cd *cdv1beta1.ComputeDomain, cliques bool, node string) int {
	e.t.Helper()
	if cliques {
		c := &cdv1beta1.ComputeDomainClique{}
		key := client.ObjectKey{Namespace: e.driverNS, Name: cdv1beta1.CliqueName(string(cd.UID), testClique)}
		if err := testCluster.Client.Get(context.Background(), key, c); err != nil {
			e.t.Fatalf("reading clique: %v", err)
		}
		for _, d := range c.Daemons {
			if d.NodeName == node {
				return d.Index
			}
		}
		return -2
	}
	cur := &cdv1beta1.ComputeDomain{}
	if err := testCluster.Client.Get(context.Background(), client.ObjectKeyFromObject(cd), cur); err != nil {
		e.t.Fatalf("reading domain: %v", err)
	}
	for _, n := range cur.Status.Nodes {
		if n.Name == node {
			return n.Index
		}
	}
	return -2
}

// reconcilerReading is reconciler with reader as its way to the apiserver.
func (e *env) reconcilerReading(cache client.Client, reader client.Reader, cliques bool) *computedomain.Reconciler {
	e.t.Helper()
	gates := features.NewGates()
	if err := gates.SetFromMap(map[string]bool{string(features.ComputeDomainCliques): cliques}); err != nil {
		e.t.Fatal(err)
	}
	return computedomain.New(cache, reader, computedomain.Options{
		DriverNamespace: e.driverNS, DaemonImage: "cdplane:test", Gates: gates, DaemonFeatureGates: features.DaemonGates(gates),
	})
}

// TestCreatesOnceWhileTheCacheLags: a pass that starts before the cache has seen the DaemonSet
// and claim templates an earlier pass created waits for the cache to show them; it sends no
// create that can only be refused as AlreadyExists.
func TestCreatesOnceWhileTheCacheLags(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	e.stopMgr() // the reconciler below makes every pass
	cd := e.createCD("created-once", 0)
	log := &writeLog{}
	held := newHeldWatches("daemonsets", "resourceclaimtemplates")
	r, _ := e.laggingReconciler(held.wrap(log.wrap(testCluster.Config, "created-once-test")), true)
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: cd.Namespace, Name: cd.Name}}
	held.hold()
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatalf("first pass: %v", err)
	}
	if err := e.passHeld(r, req, held); err != nil {
		t.Fatalf("second pass: %v", err)
	}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatalf("third pass: %v", err)
	}
	keys := e.objectsOf(cd)
	if _, _, rct := e.waitCreated(cd); rct == nil {
		t.Fatal("no workload claim template")
	}
	for collection, name := range map[string]string{
		"/apis/apps/v1/namespaces/" + e.driverNS + "/daemonsets":                        keys.ds.Name,
		"/apis/resource.k8s.io/v1/namespaces/" + e.driverNS + "/resourceclaimtemplates": keys.daemonTemplate.Name,
		"/apis/resource.k8s.io/v1/namespaces/" + e.ns + "/resourceclaimtemplates":       keys.workloadTemplate.Name,
	} {
		if diff := cmp.Diff(map[string]int{"POST": 1}, writesTo(log, collection, name)); diff != "" {
			t.Errorf("writes of %s/%s over three passes, the second on a cache that had not seen it (-want +got):\n%s", collection, name, diff)
		}
	}
}
