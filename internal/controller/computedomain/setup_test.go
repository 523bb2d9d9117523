package computedomain

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/scheme"
	"cdplane/internal/testutil"
)

// recordingQueue records AddAfter; the handler calls nothing else.
type recordingQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	added []string
	after []time.Duration
}

func (q *recordingQueue) AddAfter(r reconcile.Request, d time.Duration) {
	q.added = append(q.added, r.String())
	q.after = append(q.after, d)
}

// The handler only lists domains by an index of the cache: the fake client, with the same index,
// answers as the cache does.
func TestLabelHandler(t *testing.T) {
	const uidA, uidB = "uid-a", "uid-b"
	cdA := testutil.MakeComputeDomain("a").Namespace("ns").UID(uidA).Obj()
	cdB := testutil.MakeComputeDomain("b").Namespace("ns2").UID(uidB).Obj()
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(cdA, cdB).
		WithIndex(&cdv1beta1.ComputeDomain{}, UIDIndex, func(o client.Object) []string { return []string{string(o.GetUID())} }).
		Build()
	node := func(uid string) client.Object {
		n := testutil.MakeNode("n1")
		if uid != "" {
			n.Label(cdv1beta1.ComputeDomainLabel, uid)
		}
		return n.Obj()
	}
	pod := testutil.MakePod("daemon-x", testDriverNS).Label(cdv1beta1.ComputeDomainLabel, uidA).NodeName("n1").Obj()
	ds := testutil.MakeDaemonSet(cdv1beta1.DaemonSetName(uidB), testDriverNS).Label(cdv1beta1.ComputeDomainLabel, uidB).Obj()
	cases := map[string]struct {
		event    string // create, update or delete
		old, obj client.Object
		want     []string
	}{
		"a labelled node appears":                     {event: "create", obj: node(uidA), want: []string{"ns/a"}},
		"a node loses the label: the domain it left":  {event: "update", old: node(uidA), obj: node(""), want: []string{"ns/a"}},
		"a node moves to another domain: both":        {event: "update", old: node(uidA), obj: node(uidB), want: []string{"ns/a", "ns2/b"}},
		"an update within one domain: one request":    {event: "update", old: pod, obj: pod, want: []string{"ns/a"}},
		"a labelled DaemonSet goes":                   {event: "delete", obj: ds, want: []string{"ns2/b"}},
		"an unlabelled node: nothing":                 {event: "create", obj: node("")},
		"the label of a domain that is gone: nothing": {event: "create", obj: node("uid-gone")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := New(c, c, Options{DriverNamespace: testDriverNS, BatchWindow: 300 * time.Millisecond})
			h, q, ctx := r.labelHandler(c), &recordingQueue{}, context.Background()
			switch tc.event {
			case "create":
				h.Create(ctx, event.CreateEvent{Object: tc.obj}, q)
			case "update":
				h.Update(ctx, event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.obj}, q)
			case "delete":
				h.Delete(ctx, event.DeleteEvent{Object: tc.obj}, q)
			}
			if diff := cmp.Diff(tc.want, q.added, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
			for _, d := range q.after {
				if d != 300*time.Millisecond {
					t.Errorf("a request was queued after %s, want the batch window (300ms)", d)
				}
			}
		})
	}
}
