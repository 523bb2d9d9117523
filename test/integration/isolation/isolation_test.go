// Package isolation runs three control planes' controllers (legacy, plane-a, plane-b) against
// one real apiserver and checks that each touches only what it owns.
package isolation

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller"
	"cdplane/internal/controller/computedomain"
	"cdplane/internal/features"
	"cdplane/internal/metrics"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
	"cdplane/internal/testutil/cluster"
)

var testCluster *cluster.Cluster

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	os.Exit(cluster.Main(m, cluster.Options{}, &testCluster))
}

type planeEnv struct {
	id       string
	driverNS string
	ns       string // a namespace assigned to the plane (unlabelled for legacy)
	stop     func()
}

func startPlane(t *testing.T, id string) *planeEnv {
	t.Helper()
	p := &planeEnv{id: id}
	p.driverNS = testCluster.Namespace(t, plane.Stamp(id, nil))
	p.ns = testCluster.Namespace(t, plane.Stamp(id, nil))
	p.start(t)
	return p
}

func (p *planeEnv) start(t *testing.T) {
	t.Helper()
	mgr, err := controller.NewManager(context.Background(), testCluster.Config, controller.Options{
		Options:            computedomain.Options{DriverNamespace: p.driverNS, DaemonImage: "cdplane:test", ControlPlaneID: p.id},
		SkipNameValidation: true,
		CleanupInterval:    200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	p.stop = testutil.RunManager(t, mgr)
}

func (p *planeEnv) createCD(t *testing.T, name string) *cdv1beta1.ComputeDomain {
	t.Helper()
	w := testutil.MakeComputeDomain(name).Namespace(p.ns)
	if p.id != "" {
		w.Label(cdv1beta1.ControlPlaneLabel, p.id) // what the mutating admission policy stamps
	}
	cd := w.Obj()
	if err := testCluster.Client.Create(context.Background(), cd); err != nil {
		t.Fatal(err)
	}
	return cd
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, func() (bool, error) { return cond(), nil })
}

func hasDaemonSet(p *planeEnv, cd *cdv1beta1.ComputeDomain) bool {
	return testCluster.Client.Get(context.Background(), client.ObjectKey{Namespace: p.driverNS, Name: cdv1beta1.DaemonSetName(string(cd.UID))}, &appsv1.DaemonSet{}) == nil
}

// versions returns the resourceVersions of a plane's objects for a domain.
func versions(t *testing.T, p *planeEnv, cd *cdv1beta1.ComputeDomain) map[string]string {
	t.Helper()
	out := map[string]string{}
	c := testCluster.Client
	get := func(name string, obj client.Object, key client.ObjectKey) {
		if err := c.Get(context.Background(), key, obj); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = obj.GetResourceVersion()
	}
	get("ComputeDomain", &cdv1beta1.ComputeDomain{}, client.ObjectKeyFromObject(cd))
	get("DaemonSet", &appsv1.DaemonSet{}, client.ObjectKey{Namespace: p.driverNS, Name: cdv1beta1.DaemonSetName(string(cd.UID))})
	return out
}

// ownedBy pairs a domain with the plane that owns it (nil: a plane that runs no controller).
type ownedBy struct {
	owner *planeEnv
	cd    *cdv1beta1.ComputeDomain
}

// assertNoCrossPlaneDaemonSets fails for each domain that has a DaemonSet in the driver namespace
// of a plane that does not own it.
func assertNoCrossPlaneDaemonSets(t *testing.T, when string, planes []*planeEnv, domains ...ownedBy) {
	t.Helper()
	for _, d := range domains {
		for _, p := range planes {
			if p != d.owner && hasDaemonSet(p, d.cd) {
				owner := "plane-c (no controller)"
				if d.owner != nil {
					owner = fmt.Sprintf("plane %q", d.owner.id)
				}
				t.Errorf("%s: plane %q created a DaemonSet for %s, a domain of %s", when, p.id, d.cd.Name, owner)
			}
		}
	}
}

// hasWrittenStatus reports whether the domain's status says its resources were created: the
// owner's status write, which comes after the DaemonSet in the same pass.
func hasWrittenStatus(cd *cdv1beta1.ComputeDomain) bool {
	cur := &cdv1beta1.ComputeDomain{}
	if err := testCluster.Client.Get(context.Background(), client.ObjectKeyFromObject(cd), cur); err != nil {
		return false
	}
	return meta.IsStatusConditionTrue(cur.Status.Conditions, cdv1beta1.ConditionResourcesCreated)
}

func TestPlanesAreIsolated(t *testing.T) {
	legacy, a, b := startPlane(t, ""), startPlane(t, "plane-a"), startPlane(t, "plane-b")
	planes := []*planeEnv{legacy, a, b}
	cdL, cdA, cdB := legacy.createCD(t, "legacy"), a.createCD(t, "alpha"), b.createCD(t, "beta")
	domains := []ownedBy{{legacy, cdL}, {a, cdA}, {b, cdB}}

	// Each plane reconciles only its own domain: the DaemonSet appears in its own driver
	// namespace and nowhere else, when it appears and once the owner has written the domain's
	// status after it.
	for _, d := range domains {
		eventually(t, "DaemonSet of "+d.cd.Name+" in its plane", func() bool { return hasDaemonSet(d.owner, d.cd) })
		assertNoCrossPlaneDaemonSets(t, "as the owner's DaemonSet appeared", planes, d)
		eventually(t, "status of "+d.cd.Name+" written by its plane", func() bool { return hasWrittenStatus(d.cd) })
		assertNoCrossPlaneDaemonSets(t, "once the owner wrote the status", planes, d)
	}
	// A domain labelled for a plane that runs no controller is touched by none.
	ghost := testutil.MakeComputeDomain("ghost").Namespace(a.ns).Label(cdv1beta1.ControlPlaneLabel, "plane-c").Obj()
	if err := testCluster.Client.Create(context.Background(), ghost); err != nil {
		t.Fatal(err)
	}
	domains = append(domains, ownedBy{nil, ghost})

	before := versions(t, a, cdA)
	// plane-b acts: a domain created and deleted, its controller restarted.
	cdB2 := b.createCD(t, "beta-2")
	eventually(t, "plane-b reconciled beta-2", func() bool { return hasDaemonSet(b, cdB2) })
	if err := testCluster.Client.Delete(context.Background(), cdB2); err != nil {
		t.Fatal(err)
	}
	eventually(t, "beta-2 deleted", func() bool {
		return client.IgnoreNotFound(testCluster.Client.Get(context.Background(), client.ObjectKeyFromObject(cdB2), &cdv1beta1.ComputeDomain{})) == nil &&
			!hasDaemonSet(b, cdB2)
	})
	b.stop()
	b.start(t)
	eventually(t, "restarted plane-b reconciles again", func() bool {
		cd := b.createCD(t, fmt.Sprintf("beta-%d", time.Now().UnixNano()%100000))
		domains = append(domains, ownedBy{b, cd})
		return wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 20*time.Second, true,
			func(context.Context) (bool, error) { return hasDaemonSet(b, cd), nil }) == nil
	})
	if after := versions(t, a, cdA); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("plane-a's objects changed while plane-b acted: %v -> %v", before, after)
	}
	g := &cdv1beta1.ComputeDomain{}
	if err := testCluster.Client.Get(context.Background(), client.ObjectKeyFromObject(ghost), g); err != nil || len(g.Finalizers) != 0 || g.Status.Status != "" {
		t.Errorf("a domain of a plane without a controller was written: finalizers=%v status=%q err=%v", g.Finalizers, g.Status.Status, err)
	}
	// Every plane has had the whole test to act on every domain, plane-b a restart too.
	assertNoCrossPlaneDaemonSets(t, "at the end of the test", planes, domains...)
}

// staleCache is a cache that lies: it hands out objects with their plane label rewritten.
type staleCache struct {
	client.Client
	claim string
	// finalized: the old copy already had the finalizer (and the membership annotation), so
	// the pass goes past the finalizer to the domain's other writes.
	finalized bool
}

func (s staleCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := s.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	l := obj.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[cdv1beta1.ControlPlaneLabel] = s.claim
	obj.SetLabels(l)
	if cd, ok := obj.(*cdv1beta1.ComputeDomain); ok && cd.DeletionTimestamp == nil {
		// An old copy: no finalizer, no status yet, so the reconciler wants to write both.
		if !s.finalized {
			cd.Finalizers = nil
		}
		cd.Status = cdv1beta1.ComputeDomainStatus{}
	}
	return nil
}

// TestStaleCacheMakesNoForeignWrites hands plane-b's reconciler plane-a's domain, its DaemonSet
// and its clique through a cache claiming they are plane-b's while the server says plane-a:
// the fresh read before every write refuses, and nothing of plane-a's changes.
func TestStaleCacheMakesNoForeignWrites(t *testing.T) {
	a := startPlane(t, "plane-a")
	cdA := a.createCD(t, "alpha")
	eventually(t, "plane-a reconciled alpha", func() bool { return hasDaemonSet(a, cdA) })
	// Give plane-a a clique too, as its controller would write it.
	ds := &appsv1.DaemonSet{}
	if err := testCluster.Client.Get(context.Background(), client.ObjectKey{Namespace: a.driverNS, Name: cdv1beta1.DaemonSetName(string(cdA.UID))}, ds); err != nil {
		t.Fatal(err)
	}
	clique := testutil.MakeClique(cdv1beta1.CliqueName(string(cdA.UID), "u.1"), a.driverNS).Daemon("n1", "127.0.0.1", "u.1", 0, "Ready").Obj()
	clique.Labels = map[string]string{cdv1beta1.ComputeDomainLabel: string(cdA.UID), "app.kubernetes.io/managed-by": "cdplane", cdv1beta1.ControlPlaneLabel: "plane-a"}
	if err := testCluster.Client.Create(context.Background(), clique); err != nil {
		t.Fatal(err)
	}
	a.stop() // plane-a's own controller is out of the way; plane-a's objects must not move
	before := versions(t, a, cdA)
	cliqueRV := clique.ResourceVersion
	cdBefore := &cdv1beta1.ComputeDomain{}
	if err := testCluster.Client.Get(context.Background(), client.ObjectKeyFromObject(cdA), cdBefore); err != nil {
		t.Fatal(err)
	}

	refusalsBefore := promtest.ToFloat64(metrics.ForeignRefusals.WithLabelValues("plane-b", "ComputeDomain"))
	// plane-b's reconciler, configured on plane-a's driver namespace (the worst case: a
	// misconfiguration), reading through the lying cache.
	r := computedomain.New(staleCache{Client: testCluster.Client, claim: "plane-b"}, testCluster.Client,
		computedomain.Options{DriverNamespace: a.driverNS, DaemonImage: "x", ControlPlaneID: "plane-b"})
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: cdA.Namespace, Name: cdA.Name}}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	// With its gate off and a copy that has the finalizer, plane-b's pass would re-annotate
	// where the membership is kept.
	gatesOff := features.NewGates()
	if err := gatesOff.SetFromMap(map[string]bool{string(features.ComputeDomainCliques): false}); err != nil {
		t.Fatal(err)
	}
	rOff := computedomain.New(staleCache{Client: testCluster.Client, claim: "plane-b", finalized: true}, testCluster.Client,
		computedomain.Options{DriverNamespace: a.driverNS, DaemonImage: "x", ControlPlaneID: "plane-b", Gates: gatesOff})
	if _, err := rOff.Reconcile(context.Background(), req); err != nil {
		t.Fatalf("reconcile with the gate off: %v", err)
	}
	// And once more with the domain being deleted, which would delete the DaemonSet and clique.
	cur := &cdv1beta1.ComputeDomain{}
	if err := testCluster.Client.Get(context.Background(), client.ObjectKeyFromObject(cdA), cur); err != nil {
		t.Fatal(err)
	}
	if err := testCluster.Client.Delete(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatalf("reconcile of the deleting domain: %v", err)
	}
	after := versions(t, a, cdA)
	// The delete itself set deletionTimestamp on the domain: compare the DaemonSet and clique,
	// and check the finalizer is still there.
	if after["DaemonSet"] != before["DaemonSet"] {
		t.Errorf("plane-a's DaemonSet was written by plane-b: %s -> %s", before["DaemonSet"], after["DaemonSet"])
	}
	gotClique := &cdv1beta1.ComputeDomainClique{}
	if err := testCluster.Client.Get(context.Background(), client.ObjectKeyFromObject(clique), gotClique); err != nil || gotClique.ResourceVersion != cliqueRV {
		t.Errorf("plane-a's clique was written or deleted by plane-b (err=%v)", err)
	}
	gotCD := &cdv1beta1.ComputeDomain{}
	if err := testCluster.Client.Get(context.Background(), client.ObjectKeyFromObject(cdA), gotCD); err != nil || len(gotCD.Finalizers) != 1 ||
		!equality.Semantic.DeepEqual(gotCD.Status, cdBefore.Status) ||
		gotCD.Annotations[cdv1beta1.MembershipAnnotation] != cdBefore.Annotations[cdv1beta1.MembershipAnnotation] {
		t.Errorf("plane-a's domain was written by plane-b: finalizers=%v status %+v -> %+v annotations %v -> %v err=%v",
			gotCD.Finalizers, cdBefore.Status, gotCD.Status, cdBefore.Annotations, gotCD.Annotations, err)
	}
	if d := promtest.ToFloat64(metrics.ForeignRefusals.WithLabelValues("plane-b", "ComputeDomain")) - refusalsBefore; d < 1 {
		t.Errorf("no refusal counted (delta %v)", d)
	}
	// Let plane-a finish its domain so the namespace can go.
	a.start(t)
}
