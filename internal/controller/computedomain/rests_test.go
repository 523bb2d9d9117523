package computedomain

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

func TestLongPassesAreFollowedByARest(t *testing.T) {
	now := time.Unix(1000, 0)
	p := newPassRests()
	p.now = func() time.Time { return now }
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	const window = 200 * time.Millisecond

	// A pass no longer than the window: no rest.
	start := now
	now = now.Add(window)
	p.passed(a, start, window)
	if w := p.wait(a); w != 0 {
		t.Errorf("after a pass of the window's length: rest %v, want none", w)
	}

	// A pass of 700 ms: the domain rests 700 ms from its end, and only that domain.
	start = now
	now = now.Add(700 * time.Millisecond)
	p.passed(a, start, window)
	if w := p.wait(a); w != 700*time.Millisecond {
		t.Errorf("right after a 700ms pass: rest %v, want 700ms", w)
	}
	if w := p.wait(b); w != 0 {
		t.Errorf("another domain rests %v, want none", w)
	}
	now = now.Add(500 * time.Millisecond)
	if w := p.wait(a); w != 200*time.Millisecond {
		t.Errorf("500ms into the rest: %v left, want 200ms", w)
	}
	now = now.Add(200 * time.Millisecond)
	if w := p.wait(a); w != 0 {
		t.Errorf("at the rest's end: %v left, want none", w)
	}
	if _, ok := p.until[a]; ok {
		t.Errorf("a rest that ended is still kept")
	}

	// A very long pass rests at most maxPassRest; a domain that is gone rests no more.
	start = now
	now = now.Add(time.Minute)
	p.passed(a, start, window)
	if w := p.wait(a); w != maxPassRest {
		t.Errorf("after a one-minute pass: rest %v, want %v", w, maxPassRest)
	}
	p.forget(a)
	if w := p.wait(a); w != 0 {
		t.Errorf("a forgotten domain rests %v", w)
	}
}

// TestAPassInARestComesBackWhenItEnds: a pass that comes while its domain rests does nothing and
// asks to come back when the rest ends.
func TestAPassInARestComesBackWhenItEnds(t *testing.T) {
	r := New(nil, nil, Options{DriverNamespace: "driver"})
	r.rests = newPassRests() // as SetupWithManager does
	now := time.Unix(1000, 0)
	r.rests.now = func() time.Time { return now }
	key := types.NamespacedName{Namespace: "ns", Name: "cd"}
	r.rests.until[key] = now.Add(time.Second)
	// The reconciler has no client: a pass that did anything but wait would fail.
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
	if err != nil || res.RequeueAfter != time.Second {
		t.Errorf("a pass in a rest: %+v, %v; want to come back after 1s", res, err)
	}
}

// TestWithoutAManagerEveryPassRuns: a reconciler not set up with a manager (its caller makes
// each pass it wants) keeps no rests.
func TestWithoutAManagerEveryPassRuns(t *testing.T) {
	r := New(nil, nil, Options{DriverNamespace: "driver"})
	key := types.NamespacedName{Namespace: "ns", Name: "cd"}
	r.rests.passed(key, time.Now().Add(-time.Hour), time.Millisecond)
	if w := r.rests.wait(key); w != 0 {
		t.Errorf("a reconciler without a manager rests %v", w)
	}
}
