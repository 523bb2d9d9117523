package claimlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"cdplane/internal/testutil"
)

const lockWait = 10 * time.Second

// waiters waits until n calls hold or wait for the claim's lock.
func waiters(t *testing.T, l *Locks, uid types.UID, n int) {
	t.Helper()
	testutil.Eventually(t, lockWait, "calls on the claim's lock", func() (bool, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		cl := l.m[uid]
		return cl != nil && cl.refs == n, nil
	})
}

func forgotten(t *testing.T, l *Locks) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.m) != 0 {
		t.Errorf("%d claim locks kept after every call returned", len(l.m))
	}
}

// An unprepare stops the claim's prepare in progress (its context ends with
// ErrUnpreparedMeanwhile) and runs only once the prepare has returned.
func TestUnprepareStopsThePrepareInProgress(t *testing.T) {
	var l Locks
	ctx, releasePrepare, err := l.Prepare(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	unprepared := make(chan func())
	go func() { unprepared <- l.Unprepare("a") }()
	select {
	case <-ctx.Done():
	case <-time.After(lockWait):
		t.Fatal("the prepare's context did not end when an unprepare of its claim came")
	}
	if cause := context.Cause(ctx); !errors.Is(cause, ErrUnpreparedMeanwhile) {
		t.Errorf("the prepare's context ended with %v, want ErrUnpreparedMeanwhile", cause)
	}
	select {
	case <-unprepared:
		t.Fatal("the unprepare ran while the prepare had not returned")
	default:
	}
	releasePrepare()
	select {
	case release := <-unprepared:
		release()
	case <-time.After(lockWait):
		t.Fatal("the unprepare did not run once the prepare returned")
	}
	forgotten(t, &l)
}

// A prepare that waited for the claim while an unprepare of it ran is refused; one that comes
// after the unprepare is over prepares the claim again.
func TestPrepareWaitingBehindAnUnprepareIsRefused(t *testing.T) {
	var l Locks
	releaseUnprepare := l.Unprepare("a")
	type result struct {
		release func()
		err     error
	}
	prepared := make(chan result)
	go func() {
		_, release, err := l.Prepare(context.Background(), "a")
		prepared <- result{release, err}
	}()
	waiters(t, &l, "a", 2)
	releaseUnprepare()
	select {
	case r := <-prepared:
		if !errors.Is(r.err, ErrUnpreparedMeanwhile) {
			t.Errorf("a prepare that waited behind an unprepare: %v, want ErrUnpreparedMeanwhile", r.err)
		}
		if r.err == nil {
			r.release()
		}
	case <-time.After(lockWait):
		t.Fatal("the waiting prepare did not return once the unprepare had")
	}

	_, release, err := l.Prepare(context.Background(), "a")
	if err != nil {
		t.Fatalf("a prepare after the unprepare was over: %v", err)
	}
	release()
	forgotten(t, &l)
}

// Calls on different claims do not wait for each other; calls on the same claim take turns.
func TestClaimLocksArePerClaim(t *testing.T) {
	var l Locks
	_, releaseA, err := l.Prepare(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	_, releaseB, err := l.Prepare(context.Background(), "b")
	if err != nil {
		t.Fatalf("prepare of b while a is prepared: %v", err)
	}
	releaseB()
	done := make(chan error)
	go func() {
		_, release, err := l.Prepare(context.Background(), "a")
		if err == nil {
			release()
		}
		done <- err
	}()
	waiters(t, &l, "a", 2)
	releaseA()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("second prepare of a after the first returned: %v", err)
		}
	case <-time.After(lockWait):
		t.Fatal("the second prepare of a did not run once the first returned")
	}
	forgotten(t, &l)
}
