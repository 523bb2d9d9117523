package controller

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller"
	cdmetrics "cdplane/internal/metrics"
	"cdplane/internal/testutil/cluster"
)

// reconciles reads controller-runtime's count of finished ComputeDomain reconciles.
func reconciles(t *testing.T) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "computedomain" {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// membershipWrites counts the apiserver's write requests on ComputeDomains and cliques.
func membershipWrites(t *testing.T) float64 {
	t.Helper()
	total := 0.0
	for _, resource := range []string{"computedomains", "computedomaincliques"} {
		for _, verb := range []string{"APPLY", "PATCH", "PUT", "POST", "DELETE"} {
			total += apiserverSum(t, map[string]string{"resource": resource, "verb": verb})
		}
	}
	return total
}

func apiserverSum(t *testing.T, match map[string]string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := testCluster.MetricSum(ctx, "apiserver_request_total", match)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// statusWritesEnded reads how many of the controller's status writes have ended: each pass's,
// whether or not it had to send anything, observes the status step of
// cdplane_computedomain_reconcile_step_seconds when it ends.
func statusWritesEnded(t *testing.T) uint64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, f := range families {
		if f.GetName() != cdmetrics.ReconcileStepName {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == cdmetrics.LabelStep && l.GetValue() == cdmetrics.ReconcileStepStatus {
					n += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return n
}

// controllerWire watches one client's writes of ComputeDomains and cliques on the wire: how many
// it sent ("METHOD path", recorded as sent) and how many are still waiting for their answer.
type controllerWire struct {
	mu       sync.Mutex
	writes   []string
	inFlight int
}

func (w *controllerWire) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &controllerWireTransport{next: rt, wire: w} })
	return cfg
}

// state returns the writes sent so far and how many of them are unanswered.
func (w *controllerWire) state() ([]string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.writes...), w.inFlight
}

type controllerWireTransport struct {
	next http.RoundTripper
	wire *controllerWire
}

func (t *controllerWireTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	membership := strings.Contains(req.URL.Path, "/computedomains") || strings.Contains(req.URL.Path, "/computedomaincliques")
	if !membership || req.Method == http.MethodGet || req.Method == http.MethodHead || req.Method == http.MethodOptions {
		return t.next.RoundTrip(req)
	}
	t.wire.mu.Lock()
	t.wire.writes = append(t.wire.writes, req.Method+" "+req.URL.Path)
	t.wire.inFlight++
	t.wire.mu.Unlock()
	defer func() {
		t.wire.mu.Lock()
		t.wire.inFlight--
		t.wire.mu.Unlock()
	}()
	return t.next.RoundTrip(req)
}

// newEnvVia is newEnv with the manager reaching the apiserver through cfg.
func newEnvVia(t *testing.T, cliques bool, cfg *rest.Config, opts ...func(*controller.Options)) *env {
	t.Helper()
	e := &env{Env: cluster.NewEnv(t, testCluster), t: t, c: testCluster.Client, opts: opts}
	e.ns, e.driverNS = e.Namespace(nil), e.Namespace(nil)
	e.selector = e.ns
	e.startManagerWith(cliques, cfg)
	return e
}

// TestWritesOnlyOnChange: a reconcile that finds membership and status as they are writes
// nothing. The writes are read only once the pass that an event started has ended and no write
// of the controller's is waiting for its answer. Not parallel, so that the reconcile
// and status-write counts are this test's own.
func TestWritesOnlyOnChange(t *testing.T) {
	wire := &controllerWire{}
	e := newEnvVia(t, true, wire.wrap(testCluster.Config))

	cd := e.createCD("steady", 2)
	d1 := e.startDaemon(cd, e.addNode(cd, "n1"), testClique)
	e.startDaemon(cd, e.addNode(cd, "n2"), testClique)
	e.waitStatus(cd, cdv1beta1.StatusReady, 20*time.Second)

	clique := &cdv1beta1.ComputeDomainClique{}
	cliqueKey := client.ObjectKey{Namespace: e.driverNS, Name: cdv1beta1.CliqueName(string(cd.UID), testClique)}
	settled := func() (string, string) {
		if err := e.c.Get(e.ctx(), cliqueKey, clique); err != nil {
			t.Fatal(err)
		}
		return e.getCD(cd).ResourceVersion, clique.ResourceVersion
	}
	// touch changes nothing membership depends on, a daemon pod's unrelated label, and waits
	// until the pass it started has ended (a reconcile counted) with its status write, and
	// nothing the controller sent to ComputeDomains or cliques is still unanswered.
	touch := func(value string) {
		t.Helper()
		passes, ended := reconciles(t), statusWritesEnded(t)
		patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{"touched":%q}}}`, value)))
		if err := e.c.Patch(e.ctx(), &corev1.Pod{ObjectMeta: d1.pod.ObjectMeta}, patch); err != nil {
			t.Fatal(err)
		}
		e.eventually(2*time.Minute, "the touch "+value+" reconciled, its status write ended, no write in flight", func() (bool, error) {
			_, inFlight := wire.state()
			return reconciles(t) > passes && statusWritesEnded(t) > ended && inFlight == 0, nil
		})
	}
	// The writes that made the domain Ready, and the passes their events start, end first: a
	// first touch waits for them as it waits for its own.
	touch("settle")
	cdRV, cliqueRV := settled()
	writesBefore := membershipWrites(t)
	wireBefore, _ := wire.state()

	touch("yes")
	// The server drops a write that changes nothing, so count the requests as well: the
	// apiserver's (every writer's), and the controller's own as it sent them.
	if n := membershipWrites(t) - writesBefore; n != 0 {
		t.Errorf("a reconcile with nothing to change sent %v writes of ComputeDomains or cliques", n)
	}
	if sent, _ := wire.state(); len(sent) != len(wireBefore) {
		t.Errorf("a reconcile with nothing to change: the controller sent %v", sent[len(wireBefore):])
	}
	if gotCD, gotClique := settled(); gotCD != cdRV || gotClique != cliqueRV {
		t.Errorf("a reconcile with nothing to change wrote: ComputeDomain %s -> %s, clique %s -> %s", cdRV, gotCD, cliqueRV, gotClique)
	}
}
