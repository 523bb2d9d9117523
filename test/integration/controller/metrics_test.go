package controller

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller"
	"cdplane/internal/controller/computedomain"
	"cdplane/internal/features"
	"cdplane/internal/metrics"
	"cdplane/internal/testutil"
	"cdplane/internal/testutil/cluster"
)

// TestControllerMetrics runs a plane of its own (its id is the test's alone, so that its series
// are too) through a known sequence — a domain is created, two nodes join and turn Ready, the
// domain is deleted — and checks the controller's metrics after each step: the domains by status
// and the oldest NotReady, one join-to-Ready observation per node, the leader gauge, and a write
// counter equal, kind by kind and verb by verb, to the write requests the manager's connections
// really sent (recorded under its transport).
func TestControllerMetrics(t *testing.T) {
	t.Parallel()
	id := "metrics-" + string(uuid.NewUUID())[:8]
	e := &env{Env: cluster.NewEnv(t, testCluster), t: t, c: testCluster.Client}
	e.ns, e.driverNS = e.Namespace(nil), e.Namespace(nil)
	e.selector = e.ns

	gates := features.NewGates()
	if err := gates.SetFromMap(map[string]bool{string(features.ComputeDomainCliques): true}); err != nil {
		t.Fatal(err)
	}
	sent := &requestLog{}
	mgr, err := controller.NewManager(context.Background(), sent.wrap(testCluster.Config), controller.Options{
		Options: computedomain.Options{
			DriverNamespace: e.driverNS, DaemonImage: "cdplane:test", Gates: gates,
			DaemonFeatureGates: features.DaemonGates(gates), ControlPlaneID: id,
		},
		SkipNameValidation: true,
		DomainSelector:     labels.SelectorFromSet(labels.Set{"cdplane.test/env": e.selector}),
		CleanupInterval:    time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.stopMgr = testutil.RunManager(t, mgr)
	start := time.Now()

	expect := func(what string, want planeMetrics) {
		t.Helper()
		e.Eventually(30*time.Second, what+": metrics", func() (bool, error) {
			if diff := cmp.Diff(want, gatherPlane(t, id).gauges(), cmp.AllowUnexported(planeMetrics{})); diff != "" {
				return false, fmt.Errorf("(-want +got):\n%s", diff)
			}
			return true, nil
		})
	}

	// A domain of the plane: NotReady, since about now.
	cd := testutil.MakeComputeDomain("metrics").Namespace(e.ns).NumNodes(2).
		Label("cdplane.test/env", e.selector).Label(cdv1beta1.ControlPlaneLabel, id).Obj()
	if err := e.c.Create(e.ctx(), cd); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(cd, cdv1beta1.StatusNotReady, 30*time.Second)
	expect("domain created", planeMetrics{ready: 0, notReady: 1, oldestNotReady: true, leader: 1})
	if got := gatherPlane(t, id); got.oldest < float64(start.Add(-time.Second).Unix()) || got.oldest > float64(time.Now().Unix()+1) {
		t.Errorf("oldest NotReady %v, want the domain's creation (between %v and now)", got.oldest, start.Unix())
	}

	// Two nodes join (node, allocated claim, daemon pod, all of this plane) and turn Ready.
	// Their daemons serve metrics on their pods' addresses at one port, as in-process daemons
	// of a simulated cluster do (--metrics-bind-address=$(POD_IP):<port>).
	port := "0"
	var daemons []*node
	for _, name := range []string{"m1", "m2"} {
		nodeName := e.planeNode(cd, id, name)
		d, err := e.tryStartDaemonWith(cd, nodeName, testClique, func(n *node) { n.metricsPort, n.metricsPlane = port, id })
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ = net.SplitHostPort(d.metricsAddr)
		e.stampPlane(d.pod, id)
		daemons = append(daemons, d)
	}
	e.waitStatus(cd, cdv1beta1.StatusReady, time.Minute)
	expect("two nodes Ready", planeMetrics{ready: 1, notReady: 0, joins: 2, leader: 1})
	if got := gatherPlane(t, id); got.joinSum < 0 || got.joinSum > 2*time.Since(start).Seconds() {
		t.Errorf("join-to-Ready sum %vs, want between 0 and twice the %v the test has run", got.joinSum, time.Since(start))
	}
	checkDaemonMetrics(t, e.getCD(cd), id, daemons, time.Since(start))

	// The domain deleted: it is gone from the gauges; the joins stay observed.
	if err := e.c.Delete(e.ctx(), cd); err != nil {
		t.Fatal(err)
	}
	e.eventually(time.Minute, "the domain finalized", func() (bool, error) {
		err := e.c.Get(context.Background(), client.ObjectKeyFromObject(cd), &cdv1beta1.ComputeDomain{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	expect("domain deleted", planeMetrics{ready: 0, notReady: 0, joins: 2, leader: 1})

	// Every write the controller sent is counted, by kind, verb and subresource, and nothing
	// else. The counter moves before a request is sent: compare once both have settled.
	var counted map[string]float64
	e.Eventually(30*time.Second, "cdplane_api_writes_total counts the write requests sent", func() (bool, error) {
		counted = gatherPlane(t, id).writesByResource(t)
		if diff := cmp.Diff(counted, sent.writes()); diff != "" {
			return false, fmt.Errorf("(-counted +sent):\n%s", diff)
		}
		return true, nil
	})
	for _, w := range []string{
		"computedomains patch", "computedomains/status apply", "daemonsets create", "daemonsets delete",
		"resourceclaimtemplates create", "computedomaincliques apply",
	} {
		if counted[w] < 1 {
			t.Errorf("no %q counted (counted: %v)", w, counted)
		}
	}
	t.Logf("writes counted: %v", counted)

	// A stopped manager's domain series are gone; its leader gauge is 0.
	e.stopMgr()
	expect("manager stopped", planeMetrics{joins: 2, noDomainSeries: true})
}

// checkDaemonMetrics scrapes each daemon's endpoint once its entry is Ready there: its own
// series only (its node, the domain, the plane), registered and Ready at the entry's index, IMEX
// started and its files written, a start-to-Ready time within the test's run.
func checkDaemonMetrics(t *testing.T, cd *cdv1beta1.ComputeDomain, id string, daemons []*node, within time.Duration) {
	t.Helper()
	for _, d := range daemons {
		entry, ok := entryOf(cd, d.name)
		if !ok {
			t.Fatalf("no entry of %s in the domain's status", d.name)
		}
		var got daemonSeries
		testutil.Eventually(t, 30*time.Second, fmt.Sprintf("daemon %s at %s Ready with both peers", d.name, d.metricsAddr), func() (bool, error) {
			got = scrapeDaemon(t, d.metricsAddr)
			ok := got.values[metrics.DaemonReadyName] == 1 && got.values[metrics.DaemonIMEXPeersName] == 2
			return ok, fmt.Errorf("values %v", got.values)
		})
		want := map[string]string{metrics.LabelControlPlaneID: id, metrics.LabelComputeDomainUID: string(cd.UID), metrics.LabelNode: d.name}
		if diff := cmp.Diff(map[string]map[string]string{"": want}, got.identities); diff != "" {
			t.Errorf("daemon %s: identity labels of its series (-want +got):\n%s", d.name, diff)
		}
		for name, v := range map[string]float64{
			metrics.DaemonRegisteredName: 1, metrics.DaemonCliqueIndexName: float64(entry.Index), metrics.DaemonIMEXPeersName: 2,
			metrics.DaemonIMEXStartsName: 1, metrics.DaemonIMEXStartErrorsName: 0, metrics.DaemonSyncErrorsName: 0,
		} {
			if got.values[name] != v {
				t.Errorf("daemon %s: %s = %v, want %v", d.name, name, got.values[name], v)
			}
		}
		if w := got.values[metrics.DaemonIMEXConfigWritesName]; w < 2 {
			t.Errorf("daemon %s: %s = %v, want its config and nodes.cfg at least", d.name, metrics.DaemonIMEXConfigWritesName, w)
		}
		if s, ok := got.values[metrics.DaemonStartToReadyName]; !ok || s <= 0 || s > within.Seconds() {
			t.Errorf("daemon %s: %s = %v (present %v), want within the %v the test has run", d.name, metrics.DaemonStartToReadyName, s, ok, within)
		}
	}
}

// daemonSeries is what one daemon endpoint serves: the values by metric name (summed over the
// series of a name), and the distinct identities (control_plane_id, compute_domain_uid, node)
// of its series, all under key "" when they agree.
type daemonSeries struct {
	values     map[string]float64
	identities map[string]map[string]string
}

func scrapeDaemon(t *testing.T, addr string) daemonSeries {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/metrics: %s", addr, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := daemonSeries{values: map[string]float64{}, identities: map[string]map[string]string{}}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			id := map[string]string{}
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case metrics.LabelControlPlaneID, metrics.LabelComputeDomainUID, metrics.LabelNode:
					id[l.GetName()] = l.GetValue()
				}
			}
			key := ""
			if first, ok := out.identities[""]; ok && !cmp.Equal(first, id) {
				key = fmt.Sprint(id)
			}
			out.identities[key] = id
			out.values[name] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return out
}

// planeNode creates a Node labelled for the domain and the plane, and a channel claim of the
// domain allocated on it, labelled for the plane: a member once its daemon runs.
func (e *env) planeNode(cd *cdv1beta1.ComputeDomain, id, name string) string {
	e.t.Helper()
	name = e.ns + "-" + name
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		cdv1beta1.ComputeDomainLabel: string(cd.UID), cdv1beta1.ControlPlaneLabel: id,
	}}}
	if err := e.c.Create(e.ctx(), n); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = e.c.Delete(context.Background(), n) })
	claim := channelClaim(cd, cd.Namespace, name)
	claim.Labels[cdv1beta1.ControlPlaneLabel] = id
	if err := allocate(e.ctx(), e.c, claim, name); err != nil {
		e.t.Fatal(err)
	}
	return name
}

// stampPlane adds the plane label to a daemon pod, as the plane's DaemonSet template does: the
// plane's cache sees only its own pods.
func (e *env) stampPlane(pod *corev1.Pod, id string) {
	e.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, cdv1beta1.ControlPlaneLabel, id)
	if err := e.c.Patch(e.ctx(), pod.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		e.t.Fatal(err)
	}
}

// planeMetrics is what the controller exports for one plane.
type planeMetrics struct {
	ready, notReady float64
	oldestNotReady  bool
	// noDomainSeries: no cdplane_computedomains series of the plane at all.
	noDomainSeries bool
	joins          uint64
	leader         float64

	oldest  float64
	joinSum float64
	// writes is cdplane_api_writes_total by "kind verb subresource".
	writes map[string]float64
}

// gauges is what TestControllerMetrics compares exactly.
func (p planeMetrics) gauges() planeMetrics {
	return planeMetrics{ready: p.ready, notReady: p.notReady, oldestNotReady: p.oldestNotReady, noDomainSeries: p.noDomainSeries, joins: p.joins, leader: p.leader}
}

// kindResources maps the kinds the controller writes to their resources.
var kindResources = map[string]string{
	"ComputeDomain": "computedomains", "ComputeDomainClique": "computedomaincliques", "DaemonSet": "daemonsets",
	"ResourceClaimTemplate": "resourceclaimtemplates", "ResourceClaim": "resourceclaims", "Node": "nodes", "Pod": "pods",
	"Secret": "secrets", "Namespace": "namespaces",
}

// writesByResource is the write counter as "resource[/subresource] verb".
func (p planeMetrics) writesByResource(t *testing.T) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for k, v := range p.writes {
		f := strings.Split(k, " ")
		res, ok := kindResources[f[0]]
		if !ok {
			t.Fatalf("a write of kind %q counted, which this test does not map to a resource", f[0])
		}
		if f[2] != "" {
			res += "/" + f[2]
		}
		out[res+" "+f[1]] += v
	}
	return out
}

// gatherPlane reads plane id's series from controller-runtime's registry, which the controller
// serves at /metrics.
func gatherPlane(t *testing.T, id string) planeMetrics {
	t.Helper()
	mfs, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	p := planeMetrics{noDomainSeries: true, writes: map[string]float64{}}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l[metrics.LabelControlPlaneID] != id {
				continue
			}
			switch mf.GetName() {
			case metrics.ComputeDomainsName:
				p.noDomainSeries = false
				if l[metrics.LabelStatus] == cdv1beta1.StatusReady {
					p.ready = m.GetGauge().GetValue()
				} else {
					p.notReady = m.GetGauge().GetValue()
				}
			case metrics.ComputeDomainsOldestNotReadyName:
				p.oldestNotReady, p.oldest = true, m.GetGauge().GetValue()
			case metrics.NodeJoinToReadyName:
				p.joins, p.joinSum = m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			case metrics.ControllerLeaderName:
				p.leader = m.GetGauge().GetValue()
			case metrics.APIWritesName:
				p.writes[l[metrics.LabelKind]+" "+l[metrics.LabelVerb]+" "+l[metrics.LabelSubresource]] = m.GetCounter().GetValue()
			}
		}
	}
	return p
}

// requestLog records the write requests a manager's connections send: method, path and content
// type, failed ones included.
type requestLog struct {
	mu   sync.Mutex
	sent []sentRequest
}

type sentRequest struct{ method, path, contentType string }

func (l *requestLog) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			switch req.Method {
			case http.MethodGet, http.MethodHead, http.MethodOptions:
			default:
				l.mu.Lock()
				l.sent = append(l.sent, sentRequest{req.Method, req.URL.Path, req.Header.Get("Content-Type")})
				l.mu.Unlock()
			}
			return rt.RoundTrip(req)
		})
	})
	return cfg
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// writes returns the recorded writes as "resource[/subresource] verb", with the verbs of
// cdplane_api_writes_total, leaving out events (posted by the event broadcaster, not the
// controllers' client).
func (l *requestLog) writes() map[string]float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]float64{}
	for _, r := range l.sent {
		res, name, sub := splitPath(r.path)
		if res == "events" {
			continue
		}
		verb := map[string]string{http.MethodPost: metrics.VerbCreate, http.MethodPut: metrics.VerbUpdate, http.MethodPatch: metrics.VerbPatch, http.MethodDelete: metrics.VerbDelete}[r.method]
		switch {
		case r.method == http.MethodPatch && strings.HasPrefix(r.contentType, "application/apply-patch"):
			verb = metrics.VerbApply
		case r.method == http.MethodDelete && name == "":
			verb = metrics.VerbDeleteCollection
		}
		if sub != "" {
			res += "/" + sub
		}
		out[res+" "+verb]++
	}
	return out
}

// splitPath splits an API path (/api/v1/..., /apis/GROUP/VERSION/...) into resource, name and
// subresource.
func splitPath(path string) (resource, name, subresource string) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	if len(segs) > 0 && segs[0] == "api" {
		segs = segs[min(2, len(segs)):]
	} else {
		segs = segs[min(3, len(segs)):]
	}
	if len(segs) > 2 && segs[0] == "namespaces" {
		segs = segs[2:]
	}
	for i, s := range []*string{&resource, &name, &subresource} {
		if i < len(segs) {
			*s = segs[i]
		}
	}
	return resource, name, subresource
}
