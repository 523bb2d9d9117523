package computedomain

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/featuregate"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/membership"
	"cdplane/internal/features"
	"cdplane/internal/testutil"
)

func TestPodInfo(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ds := testutil.MakeDaemonSet(cdv1beta1.DaemonSetName(testUID), testDriverNS).UID("ds-uid").Obj()
	dsRef := testutil.ControllerRef("apps/v1", "DaemonSet", ds.Name, ds.UID)
	daemon := func() *testutil.PodWrapper {
		return testutil.MakePod("daemon-x", testDriverNS).Label(cdv1beta1.ComputeDomainLabel, testUID).Created(t0).NodeName("n1").OwnedBy(dsRef)
	}
	stranger := func(ref metav1.OwnerReference) *testutil.PodWrapper {
		return testutil.MakePod("daemon-y", testDriverNS).Label(cdv1beta1.ComputeDomainLabel, testUID).Created(t0).NodeName("n1").
			Label(cdv1beta1.CliqueIDLabel, "uuid.1").OwnedBy(ref)
	}
	notController := dsRef
	notController.Controller = nil
	cases := map[string]struct {
		pod  *testutil.PodWrapper
		want membership.Pod
	}{
		"labelled, running and ready": {
			pod:  daemon().Label(cdv1beta1.CliqueIDLabel, "uuid.1").PodIP("127.0.0.1").Ready(true),
			want: membership.Pod{NodeName: "n1", IP: "127.0.0.1", CliqueID: "uuid.1", Labelled: true, Ready: true, Created: t0, Owned: true},
		},
		"not ready": {
			pod:  daemon().Label(cdv1beta1.CliqueIDLabel, "uuid.1").PodIP("127.0.0.1").Ready(false),
			want: membership.Pod{NodeName: "n1", IP: "127.0.0.1", CliqueID: "uuid.1", Labelled: true, Created: t0, Owned: true},
		},
		"IMEX blocked on its node": {
			pod: daemon().Label(cdv1beta1.CliqueIDLabel, "uuid.1").Label(cdv1beta1.IMEXBlockedLabel, cdv1beta1.IMEXBlockedHostIMEXInUse).PodIP("127.0.0.1").Ready(false),
			want: membership.Pod{NodeName: "n1", IP: "127.0.0.1", CliqueID: "uuid.1", Labelled: true, Created: t0, Owned: true,
				Blocked: cdv1beta1.IMEXBlockedHostIMEXInUse},
		},
		"no fabric: labelled with an empty clique": {
			pod:  daemon().Label(cdv1beta1.CliqueIDLabel, "").PodIP("127.0.0.1").Ready(true),
			want: membership.Pod{NodeName: "n1", IP: "127.0.0.1", Labelled: true, Ready: true, Created: t0, Owned: true},
		},
		"not labelled by its daemon yet, no address yet": {
			pod:  daemon(),
			want: membership.Pod{NodeName: "n1", Created: t0, Owned: true},
		},
		"terminating": {
			pod:  daemon().Label(cdv1beta1.CliqueIDLabel, "uuid.1").PodIP("127.0.0.1").Ready(true).Terminating(t0.Add(time.Hour)),
			want: membership.Pod{NodeName: "n1", IP: "127.0.0.1", CliqueID: "uuid.1", Labelled: true, Ready: true, Terminating: true, Created: t0, Owned: true},
		},
		"owned by another DaemonSet of the same name (another UID): not the domain's": {
			pod:  stranger(testutil.ControllerRef("apps/v1", "DaemonSet", ds.Name, "other-uid")),
			want: membership.Pod{NodeName: "n1", CliqueID: "uuid.1", Labelled: true, Created: t0},
		},
		"a non-controller owner reference to the DaemonSet: not the domain's": {
			pod:  stranger(notController),
			want: membership.Pod{NodeName: "n1", CliqueID: "uuid.1", Labelled: true, Created: t0},
		},
		"no owner: not the domain's": {
			pod:  testutil.MakePod("daemon-z", testDriverNS).Created(t0).NodeName("n1"),
			want: membership.Pod{NodeName: "n1", Created: t0},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, podInfo(tc.pod.Obj(), ds)); diff != "" {
				t.Errorf("podInfo (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStatusIsWrittenOnlyOnChange: a domain's status is written when it changes, and a pass
// that finds nothing changed makes no status write (one write per change, not per pass); a
// status someone else changed, in what the domain says as a whole or only in a condition's
// message, is a change and is written back once. With either gate setting: cliques or
// status.nodes (no manager: no rest holds a status write).
func TestStatusIsWrittenOnlyOnChange(t *testing.T) {
	for name, cliques := range map[string]bool{"cliques": true, "status.nodes": false} {
		t.Run(name, func(t *testing.T) {
			cd := unitDomain("plane-a", false)
			c, writes := recordingClient(cd, userNamespace("plane-a"))
			r := New(c, c, Options{DriverNamespace: testDriverNS, DaemonImage: "img", ControlPlaneID: "plane-a",
				Gates: features.NewGatesForTest(t, map[featuregate.Feature]bool{features.ComputeDomainCliques: cliques})})
			statusWrites := func() int { return len(writes.of("ComputeDomain")) - len(metaWrites(writes.of("ComputeDomain"))) }
			ctx := t.Context()
			key := client.ObjectKeyFromObject(cd)
			edit := func(f func(*cdv1beta1.ComputeDomainStatus)) {
				t.Helper()
				cur := &cdv1beta1.ComputeDomain{}
				if err := c.Get(ctx, key, cur); err != nil {
					t.Fatal(err)
				}
				f(&cur.Status)
				if err := c.Status().Update(ctx, cur); err != nil {
					t.Fatal(err)
				}
				writes.reset()
			}

			pass(t, r)
			if got := statusWrites(); got != 1 {
				t.Fatalf("first pass: %d status writes, want 1 (%v)", got, writes.of("ComputeDomain"))
			}
			for i := range 2 {
				writes.reset()
				pass(t, r)
				if got := statusWrites(); got != 0 {
					t.Fatalf("pass %d with nothing changed: %d status writes, want 0 (%v)", i+2, got, writes.of("ComputeDomain"))
				}
			}
			written := &cdv1beta1.ComputeDomain{}
			if err := c.Get(ctx, key, written); err != nil {
				t.Fatal(err)
			}
			if written.Status.Status != cdv1beta1.StatusNotReady {
				t.Fatalf("status %q, want %s (no node joined)", written.Status.Status, cdv1beta1.StatusNotReady)
			}

			for change, f := range map[string]func(*cdv1beta1.ComputeDomainStatus){
				"status.status":         func(s *cdv1beta1.ComputeDomainStatus) { s.Status = cdv1beta1.StatusReady },
				"a condition's message": func(s *cdv1beta1.ComputeDomainStatus) { s.Conditions[0].Message = "edited" },
			} {
				edit(f)
				pass(t, r)
				if got := statusWrites(); got != 1 {
					t.Errorf("%s changed by someone else: %d status writes, want 1 (%v)", change, got, writes.of("ComputeDomain"))
				}
				writes.reset()
				pass(t, r)
				if got := statusWrites(); got != 0 {
					t.Errorf("the pass after %s was written back: %d status writes, want 0", change, got)
				}
				back := &cdv1beta1.ComputeDomain{}
				if err := c.Get(ctx, key, back); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(written.Status, back.Status, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")); diff != "" {
					t.Errorf("status after %s was written back (-want +got):\n%s", change, diff)
				}
			}
		})
	}
}

// TestAHeldStatusIsWrittenWhenItsRestEnds: with cliques, a status that says the same of the
// domain as a whole as the last write is not written while that write's rest lasts; the pass asks
// to come back when it ends, and the pass then writes it. A status that changes what the domain
// says as a whole (here: someone else wrote Ready) is written at once, rest or not.
func TestAHeldStatusIsWrittenWhenItsRestEnds(t *testing.T) {
	cd := unitDomain("plane-a", false)
	c, writes := recordingClient(cd, userNamespace("plane-a"))
	r := New(c, c, Options{DriverNamespace: testDriverNS, DaemonImage: "img", ControlPlaneID: "plane-a",
		Gates: features.NewGatesForTest(t, map[featuregate.Feature]bool{features.ComputeDomainCliques: true})})
	r.pacer = newPacer(nil) // as SetupWithManager does
	now := time.Unix(1000, 0)
	r.pacer.now = func() time.Time { return now }
	ctx := t.Context()
	key := client.ObjectKeyFromObject(cd)
	statusWrites := func() int { return len(writes.of("ComputeDomain")) - len(metaWrites(writes.of("ComputeDomain"))) }
	edit := func(f func(*cdv1beta1.ComputeDomainStatus)) {
		t.Helper()
		cur := &cdv1beta1.ComputeDomain{}
		if err := c.Get(ctx, key, cur); err != nil {
			t.Fatal(err)
		}
		f(&cur.Status)
		if err := c.Status().Update(ctx, cur); err != nil {
			t.Fatal(err)
		}
		writes.reset()
	}
	reconcile := func() ctrl.Result {
		t.Helper()
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	reconcile()
	if got := statusWrites(); got != 1 {
		t.Fatalf("first pass: %d status writes, want 1", got)
	}
	// The write took a second (the fake client answers at once): the status rests a second.
	r.pacer.domains[key].statusUntil = now.Add(time.Second)

	edit(func(s *cdv1beta1.ComputeDomainStatus) { s.Conditions[0].Message = "edited" })
	now = now.Add(400 * time.Millisecond)
	if res := reconcile(); statusWrites() != 0 || res.RequeueAfter != 600*time.Millisecond {
		t.Errorf("a pass 400ms into the rest, the status saying the same: %d status writes, requeue after %v; want none, 600ms", statusWrites(), res.RequeueAfter)
	}
	now = now.Add(600 * time.Millisecond)
	if res := reconcile(); statusWrites() != 1 || res.RequeueAfter != 0 {
		t.Errorf("the pass at the rest's end: %d status writes, requeue after %v; want 1, none", statusWrites(), res.RequeueAfter)
	}

	r.pacer.domains[key].statusUntil = now.Add(time.Second)
	edit(func(s *cdv1beta1.ComputeDomainStatus) { s.Status = cdv1beta1.StatusReady })
	if res := reconcile(); statusWrites() != 1 || res.RequeueAfter != 0 {
		t.Errorf("a status turning the domain back NotReady during a rest: %d status writes, requeue after %v; want 1, none", statusWrites(), res.RequeueAfter)
	}
}

// metaWrites are the writes among ws to the object itself (finalizer, annotation), not to its
// status.
func metaWrites(ws []apiWrite) []apiWrite {
	var out []apiWrite
	for _, w := range ws {
		if !strings.HasSuffix(w.Verb, "/status") {
			out = append(out, w)
		}
	}
	return out
}
