package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/sim/imexsim"
)

func TestFabriclessNodes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	cd := e.createCD("fabricless", 2)
	n1, n2 := e.addNode(cd, "f1"), e.addNode(cd, "c1")
	e.startDaemon(cd, n1, "")
	e.startDaemon(cd, n2, testClique)
	got := e.waitStatus(cd, cdv1beta1.StatusReady, 20*time.Second)
	f, ok := entryOf(got, n1)
	if !ok || f.Index != -1 || f.CliqueID != "" || f.Status != cdv1beta1.StatusReady {
		t.Errorf("fabric-less entry %+v (listed=%v), want index -1, empty clique, Ready", f, ok)
	}
	cliques := &cdv1beta1.ComputeDomainCliqueList{}
	if err := e.c.List(e.ctx(), cliques, client.InNamespace(e.driverNS)); err != nil {
		t.Fatal(err)
	}
	if len(cliques.Items) != 1 || len(cliques.Items[0].Daemons) != 1 || cliques.Items[0].Daemons[0].NodeName != n2 {
		t.Errorf("cliques: %+v, want one holding only %s", cliques.Items, n2)
	}
}

// TestIndexSurvivesPodReplacementAndIPChange: a force-deleted daemon pod replaced on the same
// node, with a new IP, keeps the node's index; peers learn the new address.
func TestIndexSurvivesPodReplacementAndIPChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	cd := e.createCD("replace", 3)
	var daemons []*node
	for i := range 3 {
		daemons = append(daemons, e.startDaemon(cd, e.addNode(cd, fmt.Sprintf("n%d", i)), testClique))
	}
	before := e.waitStatus(cd, cdv1beta1.StatusReady, 20*time.Second)
	victim := daemons[1]
	old, _ := entryOf(before, victim.name)

	victim.forceDeletePod()
	e.eventually(2*time.Minute, "entry NotReady after force deletion", func() (bool, error) {
		cur := e.getCD(cd)
		en, ok := entryOf(cur, victim.name)
		return ok && en.Status == cdv1beta1.StatusNotReady && en.Index == old.Index, nil
	})
	replacement := e.startDaemon(cd, victim.name, testClique) // new pod, new loopback IP
	after := e.waitStatus(cd, cdv1beta1.StatusReady, 20*time.Second)
	now, _ := entryOf(after, victim.name)
	if now.Index != old.Index || now.IPAddress != replacement.ip || now.IPAddress == old.IPAddress {
		t.Errorf("after replacement: entry %+v, want index %d and the new IP %s (old %s)", now, old.Index, replacement.ip, old.IPAddress)
	}
	for _, d := range []*node{daemons[0], daemons[2]} {
		e.eventually(2*time.Minute, "peers reconnect to the new address", func() (bool, error) {
			st, err := d.status()
			return err == nil && sets.New(st.Connected...).Has(replacement.ip), err
		})
	}
	// Nobody else's index moved.
	for _, d := range []*node{daemons[0], daemons[2]} {
		b, _ := entryOf(before, d.name)
		a, _ := entryOf(after, d.name)
		if a.Index != b.Index {
			t.Errorf("index of %s moved from %d to %d", d.name, b.Index, a.Index)
		}
	}
}

// TestEighteenJoinAtOnce: a full clique joins at once and gets 18 distinct indexes, and each
// daemon makes exactly one API write, the clique label on its own pod (DESIGN: "per-daemon API
// writes stay at one"), counted on each daemon's own client.
func TestEighteenJoinAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	cd := e.createCD("eighteen", 18)
	var names []string
	for i := range 18 {
		names = append(names, e.addNode(cd, fmt.Sprintf("n%02d", i)))
	}
	// All at once: one goroutine per daemon; errors come back here (t.Fatal only on the test's
	// own goroutine).
	daemons := make([]*node, len(names))
	errs := make(chan error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := e.tryStartDaemon(cd, name, testClique)
			daemons[i] = d
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got := e.waitStatus(cd, cdv1beta1.StatusReady, 60*time.Second)
	idx := sets.New[int]()
	for _, n := range got.Status.Nodes {
		idx.Insert(n.Index)
	}
	if len(got.Status.Nodes) != 18 || idx.Len() != 18 || !idx.Has(0) || !idx.Has(17) {
		t.Errorf("want 18 entries with indexes 0..17, got %d entries, indexes %v", len(got.Status.Nodes), sets.List(idx))
	}
	// Every daemon has seen the whole membership (its IMEX is connected to its 17 peers), so
	// whatever a daemon writes in response to membership has been written by now.
	for _, d := range daemons {
		e.eventually(2*time.Minute, "IMEX on "+d.name+" connected to its 17 peers", func() (bool, error) {
			st, err := d.status()
			return err == nil && len(st.Connected) == 17, err
		})
	}
	for _, d := range daemons {
		want := []string{"PATCH /api/v1/namespaces/" + d.pod.Namespace + "/pods/" + d.pod.Name}
		if diff := cmp.Diff(want, d.writes.list()); diff != "" {
			t.Errorf("API writes of the daemon on %s (-want +got):\n%s", d.name, diff)
		}
	}
}

// TestIMEXCrashRestartsAndReloadsOnlyOnChange: IMEX restarts after a crash; SIGUSR1 (a reload)
// follows membership changes only.
func TestIMEXCrashRestartsAndReloadsOnlyOnChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	cd := e.createCD("crash", 1)
	d1 := e.startDaemon(cd, e.addNode(cd, "n1"), testClique)
	e.waitStatus(cd, cdv1beta1.StatusReady, 20*time.Second)
	st, err := d1.status()
	if err != nil || st.Reloads != 0 {
		t.Fatalf("after the first start: reloads=%d (err=%v), want 0", st.Reloads, err)
	}
	d2 := e.startDaemon(cd, e.addNode(cd, "n2"), testClique)
	e.eventually(2*time.Minute, "a reload after a peer joined", func() (bool, error) {
		st, err := d1.status()
		return err == nil && st.Reloads == 1 && sets.New(st.Connected...).Has(d2.ip), err
	})
	e.waitStatus(cd, cdv1beta1.StatusReady, 20*time.Second)
	// A change the daemon sees that leaves its peers as they are sends no reload: an annotation
	// on its clique, the object it watches (with cliques on it does not watch its domain).
	clique := &cdv1beta1.ComputeDomainClique{ObjectMeta: metav1.ObjectMeta{Namespace: e.driverNS, Name: cdv1beta1.CliqueName(string(cd.UID), testClique)}}
	touch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"cdplane.test/touch":"1"}}}`))
	if err := e.c.Patch(e.ctx(), clique, touch); err != nil {
		t.Fatal(err)
	}
	// A third node joins after that change: exactly one more reload means the touch sent none.
	// The daemon handles its clique's events in order, and the touch, one watch event, comes
	// well before the entry of a node whose daemon starts only now.
	d3 := e.startDaemon(cd, e.addNode(cd, "n3"), testClique)
	e.eventually(2*time.Minute, "n3 connected", func() (bool, error) {
		st, err := d1.status()
		return err == nil && sets.New(st.Connected...).Has(d3.ip), err
	})
	e.waitStatus(cd, cdv1beta1.StatusReady, 20*time.Second)
	if st, _ := d1.status(); st.Reloads != 2 {
		t.Errorf("reloads=%d after one no-op change of the clique and one peer joining, want 2", st.Reloads)
	}

	// Crash IMEX on n2: the domain goes NotReady, the daemon restarts IMEX, Ready again. The
	// restart is held back until the test has seen NotReady: with a 100ms backoff the NotReady
	// spell is otherwise shorter than the readiness probe's period.
	d2.starts.held.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := imexsim.Crash(ctx, d2.config().IMEXConfigPath()); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(cd, cdv1beta1.StatusNotReady, 20*time.Second)
	d2.starts.held.Store(false)
	e.waitStatus(cd, cdv1beta1.StatusReady, 30*time.Second)
	e.eventually(2*time.Minute, "restarted IMEX reconnected", func() (bool, error) {
		st, err := d2.status()
		return err == nil && sets.New(st.Connected...).Has(d1.ip), err
	})
}

// TestForeignClaimTemplateIsLeftAlone: a pre-existing template of the same name, not created for
// the domain, is never changed or deleted, and the clash is reported on the domain.
func TestForeignClaimTemplateIsLeftAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	foreign := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "clash-channel", Namespace: e.ns, Labels: map[string]string{"team": "other"}},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.example.com"}}},
		}}},
	}
	if err := e.c.Create(e.ctx(), foreign); err != nil {
		t.Fatal(err)
	}
	cd := e.createCD("clash", 0)
	e.eventually(2*time.Minute, "the clash is reported", func() (bool, error) {
		for _, c := range e.getCD(cd).Status.Conditions {
			if c.Type == cdv1beta1.ConditionResourcesCreated && c.Status == metav1.ConditionFalse && c.Reason == cdv1beta1.ReasonNameClash {
				return true, nil
			}
		}
		return false, nil
	})
	if err := e.c.Delete(e.ctx(), cd); err != nil {
		t.Fatal(err)
	}
	e.eventually(2*time.Minute, "domain deleted", func() (bool, error) {
		err := e.c.Get(context.Background(), client.ObjectKeyFromObject(cd), &cdv1beta1.ComputeDomain{})
		return client.IgnoreNotFound(err) == nil && err != nil, nil
	})
	after := &resourcev1.ResourceClaimTemplate{}
	if err := e.c.Get(e.ctx(), client.ObjectKeyFromObject(foreign), after); err != nil {
		t.Fatalf("the foreign template is gone: %v", err)
	}
	if after.ResourceVersion != foreign.ResourceVersion {
		t.Errorf("the foreign template was written: resourceVersion %s -> %s", foreign.ResourceVersion, after.ResourceVersion)
	}
}

// TestGateFlipKeepsDomainsReady restarts the controller with the ComputeDomainCliques gate
// flipped, both ways, while a domain is live: it stays Ready (no write of the domain during the
// flips leaves it otherwise, watched, not sampled), no index moves, the DaemonSet is
// not changed (it keeps the gate value it was created with) and IMEX is not reloaded; the
// daemons, started with the first value, follow the controller either way.
func TestGateFlipKeepsDomainsReady(t *testing.T) {
	t.Parallel()
	for name, startWithCliques := range map[string]bool{"on to off to on": true, "off to on to off": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, startWithCliques)
			cd := e.createCD("flip", 3)
			var daemons []*node
			for i := range 3 {
				daemons = append(daemons, e.startDaemon(cd, e.addNode(cd, fmt.Sprintf("n%d", i)), testClique))
			}
			before := e.waitStatus(cd, cdv1beta1.StatusReady, 30*time.Second)
			place := map[bool]string{true: cdv1beta1.MembershipInCliques, false: cdv1beta1.MembershipInStatus}
			if got := before.Annotations[cdv1beta1.MembershipAnnotation]; got != place[startWithCliques] {
				t.Errorf("membership annotation %q, want %q", got, place[startWithCliques])
			}
			ds := daemonSetOf(t, e, cd)
			// Daemons that started before all peers joined have reloaded already: count from here.
			reloads := map[string]int{}
			for _, d := range daemons {
				e.eventually(2*time.Minute, "IMEX connected to both peers", func() (bool, error) {
					st, err := d.status()
					reloads[d.name] = st.Reloads
					return err == nil && len(st.Connected) == 2, err
				})
			}
			// Every write of the domain from here to the end of both flips must leave it Ready.
			written := watchStatus(t, cd, before.ResourceVersion)
			gate := startWithCliques
			for range 2 {
				gate = !gate
				e.stopMgr()
				e.startManager(gate)
				e.eventually(2*time.Minute, fmt.Sprintf("cliques present=%v", gate), func() (bool, error) {
					list := &cdv1beta1.ComputeDomainCliqueList{}
					if err := e.c.List(context.Background(), list, client.InNamespace(e.driverNS)); err != nil {
						return false, err
					}
					return (len(list.Items) == 1) == gate, nil
				})
				after := e.getCD(cd)
				// The kubelet plugins read where the membership is from this annotation.
				if got := after.Annotations[cdv1beta1.MembershipAnnotation]; got != place[gate] {
					t.Errorf("gate=%v: membership annotation %q, want %q", gate, got, place[gate])
				}
				if after.Status.Status != cdv1beta1.StatusReady {
					t.Errorf("gate=%v: status %s, want Ready", gate, after.Status.Status)
				}
				for _, b := range before.Status.Nodes {
					a, ok := entryOf(after, b.Name)
					if !ok || a.Index != b.Index {
						t.Errorf("gate=%v: entry of %s is %+v (listed=%v), want index %d", gate, b.Name, a, ok, b.Index)
					}
				}
				if got := daemonSetOf(t, e, cd); got.Generation != ds.Generation {
					t.Errorf("gate=%v: DaemonSet generation %d -> %d: the flip rolled the daemons", gate, ds.Generation, got.Generation)
				}
				for _, d := range daemons {
					if st, err := d.status(); err != nil || st.Reloads != reloads[d.name] {
						t.Errorf("gate=%v: IMEX on %s reloaded %d times since the flip (err=%v), want 0", gate, d.name, st.Reloads-reloads[d.name], err)
					}
				}
			}
			written.checkReadyThroughout(t, "both flips")
		})
	}
}

func daemonSetOf(t *testing.T, e *env, cd *cdv1beta1.ComputeDomain) *appsv1.DaemonSet {
	t.Helper()
	ds := &appsv1.DaemonSet{}
	if err := e.c.Get(e.ctx(), client.ObjectKey{Namespace: e.driverNS, Name: "computedomain-daemon-" + string(cd.UID)}, ds); err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestDaemonFollowsWhereTheDomainKeepsItsMembership: a daemon with ComputeDomainCliques whose
// clique does not come looks, each time its clique wait passes, where the domain's controller
// keeps the membership (the domain's annotation, its metadata read alone): while that says
// cliques it never reads the domain itself, however long it waits (at 20,016 nodes in a burst,
// daemons that had waited 2 minutes watched the whole domain and received every status write);
// once a controller with the gate off says status, it reads its entry there and the domain
// becomes Ready.
func TestDaemonFollowsWhereTheDomainKeepsItsMembership(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	cd := e.createCD("place", 1)
	e.eventually(time.Minute, "the membership annotation says cliques, and the DaemonSet", func() (bool, error) {
		ds := &appsv1.DaemonSet{}
		err := e.c.Get(context.Background(), client.ObjectKey{Namespace: e.driverNS, Name: "computedomain-daemon-" + string(cd.UID)}, ds)
		return e.getCD(cd).Annotations[cdv1beta1.MembershipAnnotation] == cdv1beta1.MembershipInCliques && err == nil, client.IgnoreNotFound(err)
	})
	e.stopMgr() // no controller: the clique does not come
	d, err := e.tryStartDaemonWith(cd, e.addNode(cd, "n0"), testClique, func(n *node) {
		n.cliques, n.cliqueWait = true, 300*time.Millisecond
	})
	if err != nil {
		t.Fatal(err)
	}
	domainPath := "/apis/resource.nvidia.com/v1beta1/namespaces/" + cd.Namespace + "/computedomains"
	placeReads := func() (n int) {
		for _, r := range d.writes.readList() {
			if strings.HasPrefix(r, domainPath+"/"+cd.Name+"?") {
				n++
			}
		}
		return n
	}
	domainReads := func() (reads []string) {
		for _, r := range d.writes.readList() {
			if strings.HasPrefix(r, domainPath+"?") {
				reads = append(reads, r)
			}
		}
		return reads
	}
	e.eventually(time.Minute, "the daemon looked where the membership is three times", func() (bool, error) {
		return placeReads() >= 3, nil
	})
	if r := domainReads(); len(r) > 0 {
		t.Errorf("the domain says its membership is in cliques, yet the daemon read the domain: %q", r)
	}

	e.startManager(false)
	e.waitStatus(cd, cdv1beta1.StatusReady, time.Minute)
	if len(domainReads()) == 0 {
		t.Errorf("the domain became Ready without the daemon reading it")
	}
}
