package secretmirror

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"cdplane/internal/metrics"
	"cdplane/internal/scheme"
)

// secretWrite is one write the mirror sent: its verb and the object's namespace and name.
type secretWrite struct{ Verb, Namespace, Name string }

// writeLog records the writes sent through a client made by mirrorClient.
type writeLog struct {
	mu     sync.Mutex
	writes []secretWrite
}

func (l *writeLog) add(verb string, obj client.Object) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes = append(l.writes, secretWrite{verb, obj.GetNamespace(), obj.GetName()})
}

func (l *writeLog) list() []secretWrite {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.writes)
}

// mirrorClient is a fake client holding objs that records every write sent through it (and
// refuses server-side apply, which the mirror does not use), calling funcs first where set: a
// func that returns an error fails the write, which is not made.
func mirrorClient(funcs interceptor.Funcs, objs ...client.Object) (recorded, raw client.WithWatch, _ *writeLog) {
	l := &writeLog{}
	raw = fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).Build()
	recorded = interceptor.NewClient(raw, interceptor.Funcs{
		Get: funcs.Get, List: funcs.List,
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			l.add("create", obj)
			if funcs.Create != nil {
				if err := funcs.Create(ctx, c, obj, opts...); err != nil {
					return err
				}
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			l.add("update", obj)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			l.add("patch", obj)
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			l.add("delete", obj)
			return c.Delete(ctx, obj, opts...)
		},
		DeleteAllOf: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			l.add("deletecollection", obj)
			return c.DeleteAllOf(ctx, obj, opts...)
		},
		Apply: func(context.Context, client.WithWatch, runtime.ApplyConfiguration, ...client.ApplyOption) error {
			l.add("apply", &corev1.Secret{})
			return errApply
		},
	})
	return recorded, raw, l
}

var errApply = errors.New("the mirror does not use server-side apply")

// testMirror is a mirror of opts over c (cache and apiserver alike), recording its events.
func testMirror(t *testing.T, opts Options, c client.Client) (*Reconciler, *events.FakeRecorder) {
	t.Helper()
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	rec := events.NewFakeRecorder(16)
	r.client, r.reader, r.recorder, r.log = c, c, rec, ctrl.Log
	return r, rec
}

func namespace(name string, l map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

func secret(namespace, name string, l map[string]string, data string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: l},
		Type:       corev1.SecretTypeOpaque, Data: map[string][]byte{"k": []byte(data)},
	}
}

// foreignCount is the mirror's and the plane-wide refusal counters of plane-a.
func foreignCount() (mirror, plane float64) {
	return promtestutil.ToFloat64(metrics.SecretMirrorForeignTargets.WithLabelValues("plane-a", srcNS)),
		promtestutil.ToFloat64(metrics.ForeignRefusals.WithLabelValues("plane-a", "Secret"))
}

// TestForeignTargetIsNeverWritten: a same-named Secret in a target that does not carry the
// plane's marker is foreign, whatever else it carries: the mirror sends no write of any kind,
// leaves it as it was, and reports the refusal (a Warning event on the source, both refusal
// counters) and looks again after ForeignRecheckInterval. The pass itself succeeds: the other
// targets are mirrored.
func TestForeignTargetIsNeverWritten(t *testing.T) {
	cases := map[string]map[string]string{
		"no labels":                                  nil,
		"the plane label alone":                      {pl: "plane-a"},
		"copied from another source namespace":       {pl: "plane-a", MirroredFromLabel: "elsewhere"},
		"the legacy plane's copy (no plane label)":   {MirroredFromLabel: srcNS},
		"another plane's copy of the same namespace": {pl: "plane-b", MirroredFromLabel: srcNS},
	}
	for name, foreignLabels := range cases {
		t.Run(name, func(t *testing.T) {
			src := makeSource("creds", map[string]string{"k": "source"})
			foreign := secret("team", "creds", foreignLabels, "theirs")
			c, raw, writes := mirrorClient(interceptor.Funcs{}, src,
				namespace("team", map[string]string{pl: "plane-a"}), namespace("other", map[string]string{pl: "plane-a"}), foreign)
			r, rec := testMirror(t, planeOpts(), c)
			before := &corev1.Secret{}
			if err := raw.Get(t.Context(), client.ObjectKeyFromObject(foreign), before); err != nil {
				t.Fatal(err)
			}
			mirrorBefore, planeBefore := foreignCount()

			res, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: k8stypes.NamespacedName{Namespace: srcNS, Name: "creds"}})
			if err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			if res.RequeueAfter != DefaultForeignRecheckInterval {
				t.Errorf("requeued after %s, want the foreign recheck interval %s", res.RequeueAfter, DefaultForeignRecheckInterval)
			}
			// The only write is the copy in the other target.
			if diff := cmp.Diff([]secretWrite{{"create", "other", "creds"}}, writes.list()); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			after := &corev1.Secret{}
			if err := raw.Get(t.Context(), client.ObjectKeyFromObject(foreign), after); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("the foreign Secret changed (-before +after):\n%s", diff)
			}
			mirrorAfter, planeAfter := foreignCount()
			if mirrorAfter-mirrorBefore != 1 || planeAfter-planeBefore != 1 {
				t.Errorf("refusals counted: mirror +%v, plane-wide +%v; want +1 each", mirrorAfter-mirrorBefore, planeAfter-planeBefore)
			}
			select {
			case ev := <-rec.Events:
				if !strings.Contains(ev, corev1.EventTypeWarning+" "+ReasonForeignTarget) || !strings.Contains(ev, "team/creds") {
					t.Errorf("event %q, want a %s %s event naming team/creds", ev, corev1.EventTypeWarning, ReasonForeignTarget)
				}
			default:
				t.Errorf("no event reported the foreign Secret")
			}
		})
	}
}

// TestWriteOnceForeign: the decision itself, from a fresh read, for each kind of existing
// Secret: only the plane's copy is written, and a foreign one is reported as such.
func TestWriteOnceForeign(t *testing.T) {
	src := makeSource("creds", map[string]string{"k": "source"})
	o := planeOpts()
	o.Defaults()
	cases := map[string]struct {
		existing *corev1.Secret
		want     outcome
		writes   []secretWrite
	}{
		"none: created":                   {want: outcomeCreated, writes: []secretWrite{{"create", "team", "creds"}}},
		"the plane's stale copy: updated": {existing: secret("team", "creds", Marker("plane-a", srcNS), "old"), want: outcomeUpdated, writes: []secretWrite{{"update", "team", "creds"}}},
		"foreign: left alone":             {existing: secret("team", "creds", map[string]string{"app": "x"}, "theirs"), want: outcomeForeign},
		"an empty plane label: foreign":   {existing: secret("team", "creds", map[string]string{pl: "", MirroredFromLabel: srcNS}, "theirs"), want: outcomeForeign},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			objs := []client.Object{src, namespace("team", map[string]string{pl: "plane-a"})}
			if tc.existing != nil {
				objs = append(objs, tc.existing)
			}
			c, _, writes := mirrorClient(interceptor.Funcs{}, objs...)
			r, _ := testMirror(t, o, c)
			got, err := r.writeOnce(t.Context(), DesiredCopy(o, src, "team"))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("outcome %s, want %s", got, tc.want)
			}
			if diff := cmp.Diff(tc.writes, writes.list(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
		})
	}
}
