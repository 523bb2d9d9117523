package computedomain

import (
	"context"
	"errors"
	"fmt"
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

	t.Run("the domain turning Ready while a write runs", func(t *testing.T) {
		s, ended := wired()
		release := make(chan struct{})
		var wrote []cdv1beta1.ComputeDomainStatus
		writes := func(st cdv1beta1.ComputeDomainStatus) func(context.Context) error {
			return func(context.Context) error { <-release; wrote = append(wrote, st); return nil }
		}
		if err := s.write(ctx, key, st(1), writes(st(1))); err != nil {
			t.Fatal(err)
		}
		// Passes while it runs: one more node, then Ready, then one more Ready node.
		ready := func(n int32) cdv1beta1.ComputeDomainStatus {
			return cdv1beta1.ComputeDomainStatus{Status: cdv1beta1.StatusReady, ReadyNodes: n}
		}
		for _, next := range []cdv1beta1.ComputeDomainStatus{st(2), ready(3), ready(4)} {
			if err := s.write(ctx, key, next, writes(next)); err != nil {
				t.Fatal(err)
			}
		}
		close(release)
		none(t, s, ended) // no pass is needed: the newest was written
		if len(wrote) != 2 || wrote[0].ReadyNodes != 1 || wrote[1].ReadyNodes != 4 {
			t.Errorf("wrote %+v; want the first status, then the newest (Ready, 4 nodes)", wrote)
		}
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

	t.Run("a status resting after its write", func(t *testing.T) {
		s, ended := wired()
		var clock atomic.Int64 // nanoseconds after t0
		t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
		s.now = func() time.Time { return t0.Add(time.Duration(clock.Load())) }
		var timers []time.Duration
		var fire []func()
		s.afterFunc = func(d time.Duration, f func()) { timers, fire = append(timers, d), append(fire, f) }
		var runs atomic.Int32
		takes2s := func(context.Context) error { runs.Add(1); clock.Add(int64(2 * time.Second)); return nil }
		if err := s.write(ctx, key, st(1), takes2s); err != nil {
			t.Fatal(err)
		}
		none(t, s, ended) // written from 0 s to 2 s: rests until 4 s

		clock.Store(int64(3 * time.Second))
		for _, ready := range []int32{1, 2, 3} { // 1: as written (the pass may be for someone else's change)
			if err := s.write(ctx, key, st(ready), takes2s); err != nil {
				t.Fatal(err)
			}
		}
		if s.busy(key) || runs.Load() != 1 {
			t.Fatalf("a write started during the rest (%d writes)", runs.Load())
		}
		if len(timers) != 1 || timers[0] != time.Second {
			t.Fatalf("passes during the rest bring the domain back after %v, want once after 1s", timers)
		}
		fire[0]()
		if got := next(t, s.again); got != key {
			t.Errorf("again for %v, want %v", got, key)
		}
		clock.Store(int64(4 * time.Second))
		if err := s.write(ctx, key, st(3), takes2s); err != nil {
			t.Fatal(err)
		}
		none(t, s, ended)
		if runs.Load() != 2 {
			t.Errorf("%d writes ran, want 2 (the second once the rest ended)", runs.Load())
		}

		// The domain turning Ready is written at once, rest or not.
		clock.Store(int64(7 * time.Second)) // the second write ran 4-6 s: rests until 8 s
		ready := cdv1beta1.ComputeDomainStatus{Status: cdv1beta1.StatusReady, ReadyNodes: 3}
		if err := s.write(ctx, key, ready, takes2s); err != nil {
			t.Fatal(err)
		}
		none(t, s, ended)
		if runs.Load() != 3 || len(timers) != 1 {
			t.Errorf("the Ready status: %d writes ran (want 3), %d passes scheduled (want 1)", runs.Load(), len(timers))
		}
	})

	t.Run("rests past their end are swept", func(t *testing.T) {
		s, ended := wired()
		var clock atomic.Int64
		s.now = func() time.Time { return time.Unix(0, clock.Load()) }
		instant := func(context.Context) error { clock.Add(int64(time.Millisecond)); return nil }
		for i := range 3 * minSweep {
			k := types.NamespacedName{Namespace: "ns", Name: fmt.Sprint("cd", i)}
			if err := s.write(ctx, k, st(1), instant); err != nil {
				t.Fatal(err)
			}
			<-ended
			clock.Add(int64(time.Second)) // every rest so far has ended
		}
		s.mu.Lock()
		n := len(s.rests)
		s.mu.Unlock()
		if n > minSweep {
			t.Errorf("%d rests kept after %d domains' writes, want at most %d", n, 3*minSweep, minSweep)
		}
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
