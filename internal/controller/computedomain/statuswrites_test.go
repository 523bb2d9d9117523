package computedomain

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	cdv1beta1 "cdplane/api/v1beta1"
)

// TestStatusWrites: a status write runs apart from the pass; while it runs, a pass with a
// different status starts no second write and the domain comes back once the first ends; the
// same status brings nothing back; a failed write comes back on the failure channel; without
// the controller's channels the write runs within the pass.
func TestStatusWrites(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "cd"}
	st := func(ready int32) cdv1beta1.ComputeDomainStatus {
		return cdv1beta1.ComputeDomainStatus{ReadyNodes: ready}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	next := func(t *testing.T, ch chan event.TypedGenericEvent[*cdv1beta1.ComputeDomain]) types.NamespacedName {
		t.Helper()
		select {
		case e := <-ch:
			return types.NamespacedName{Namespace: e.Object.Namespace, Name: e.Object.Name}
		case <-time.After(30 * time.Second):
			t.Fatal("no event")
			return types.NamespacedName{}
		}
	}
	// wired returns statusWrites with the controller's channels, and a channel that receives
	// once per background write when it is done with (its domain sent back or not).
	wired := func() (*statusWrites, chan struct{}) {
		s := newStatusWrites()
		s.wire()
		ended := make(chan struct{}, 8)
		s.ended = func() { ended <- struct{}{} }
		return s, ended
	}
	// none waits for the write to be done with and checks nothing was sent back.
	none := func(t *testing.T, s *statusWrites, ended chan struct{}) {
		t.Helper()
		select {
		case <-ended:
		case <-time.After(30 * time.Second):
			t.Fatal("the write did not end")
		}
		select {
		case e := <-s.again:
			t.Fatalf("unexpected again for %s", e.Object.Name)
		case e := <-s.failed:
			t.Fatalf("unexpected failure for %s", e.Object.Name)
		default:
		}
		if s.busy(key) {
			t.Error("a write is left running")
		}
	}

	t.Run("a newer status while one is written", func(t *testing.T) {
		s, ended := wired()
		release := make(chan struct{})
		var runs atomic.Int32
		blocked := func(context.Context) error { runs.Add(1); <-release; return nil }
		if err := s.write(ctx, key, st(1), blocked); err != nil {
			t.Fatal(err)
		}
		if !s.busy(key) {
			t.Fatal("no write running")
		}
		// Returns at once although the first write is blocked; starts nothing.
		if err := s.write(ctx, key, st(2), blocked); err != nil {
			t.Fatal(err)
		}
		close(release)
		if got := next(t, s.again); got != key {
			t.Errorf("again for %v, want %v", got, key)
		}
		if n := runs.Load(); n != 1 {
			t.Errorf("%d writes ran, want 1 (the second waits for the pass it brings back)", n)
		}
		none(t, s, ended)
	})

	t.Run("the same status while it is written", func(t *testing.T) {
		s, ended := wired()
		release := make(chan struct{})
		blocked := func(context.Context) error { <-release; return nil }
		if err := s.write(ctx, key, st(1), blocked); err != nil {
			t.Fatal(err)
		}
		if err := s.write(ctx, key, st(1), blocked); err != nil {
			t.Fatal(err)
		}
		close(release)
		none(t, s, ended)
	})

	t.Run("a failed write", func(t *testing.T) {
		s, ended := wired()
		if err := s.write(ctx, key, st(1), func(context.Context) error { return errors.New("conflict") }); err != nil {
			t.Fatal(err)
		}
		if got := next(t, s.failed); got != key {
			t.Errorf("failure for %v, want %v", got, key)
		}
		none(t, s, ended)
	})

	t.Run("not wired: within the pass", func(t *testing.T) {
		s := newStatusWrites()
		boom := errors.New("boom")
		if err := s.write(ctx, key, st(1), func(context.Context) error { return boom }); !errors.Is(err, boom) {
			t.Errorf("err %v, want the write's", err)
		}
		if s.busy(key) {
			t.Error("a write is left running")
		}
	})
}

// busy reports whether a status write runs for key.
func (s *statusWrites) busy(key types.NamespacedName) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running[key] != nil
}
