// Package claimlock serialises the kubelet plugin's prepares and unprepares of one claim (Locks).
package claimlock

import (
	"context"
	"errors"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// ErrUnpreparedMeanwhile is the cause of a prepare stopped, or refused, because an unprepare of
// its claim came while it ran or waited.
var ErrUnpreparedMeanwhile = errors.New("the claim was unprepared while this prepare was in progress; prepare it again if it is still needed")

// Locks serialises the prepares and unprepares of one claim, for their whole run (opMu,
// which serialises all of them, is released while a channel prepare waits for its daemon), and
// makes sure that a prepare never completes after an unprepare of its claim:
//   - an unprepare stops the prepare of its claim in progress (its context is cancelled with
//     ErrUnpreparedMeanwhile), waits for it to return, then undoes whatever it did;
//   - a prepare that was waiting for the claim's lock while an unprepare of the claim started
//     or ran fails with ErrUnpreparedMeanwhile instead of preparing the claim again: it may be
//     a call from before the unprepare (a retry, a plugin restart). A new prepare arriving
//     once the unprepare is over proceeds, so a claim can be prepared again.
//
// The kubelet serialises its calls per claim, but the plugin's gRPC server does not
// (draplugin.Serialize is off so that a daemon claim can be prepared while a channel prepare
// waits), and a retried or replayed call can overlap another. The lock is always taken before
// opMu.
type Locks struct {
	mu sync.Mutex
	m  map[types.UID]*claimLock
}

type claimLock struct {
	run sync.Mutex // held by the claim's running prepare or unprepare
	// The fields below are guarded by Locks.mu.
	refs int // calls holding or waiting for run
	// unprepares counts the starts and ends of the claim's unprepares while the entry lives.
	unprepares uint64
	// cancelPrepare stops the prepare holding run; nil when none does.
	cancelPrepare context.CancelCauseFunc
}

// ref returns the claim's lock, counting the caller in; l.mu is held.
func (l *Locks) ref(uid types.UID) *claimLock {
	if l.m == nil {
		l.m = map[types.UID]*claimLock{}
	}
	cl := l.m[uid]
	if cl == nil {
		cl = &claimLock{}
		l.m[uid] = cl
	}
	cl.refs++
	return cl
}

// unref counts the caller out and forgets the lock when nobody holds or waits for it; l.mu is
// held.
func (l *Locks) unref(uid types.UID, cl *claimLock) {
	cl.refs--
	if cl.refs == 0 {
		delete(l.m, uid)
	}
}

// Prepare takes the claim's lock for a prepare. It returns the context the prepare runs with
// (cancelled with ErrUnpreparedMeanwhile when an unprepare of the claim comes) and the release
// function, or ErrUnpreparedMeanwhile, when an unprepare of the claim started or ran while this
// prepare waited for the lock.
func (l *Locks) Prepare(ctx context.Context, uid types.UID) (context.Context, func(), error) {
	l.mu.Lock()
	cl := l.ref(uid)
	seen := cl.unprepares
	l.mu.Unlock()

	cl.run.Lock()
	l.mu.Lock()
	if cl.unprepares != seen {
		l.unref(uid, cl)
		l.mu.Unlock()
		cl.run.Unlock()
		return nil, nil, ErrUnpreparedMeanwhile
	}
	ctx, cancel := context.WithCancelCause(ctx)
	cl.cancelPrepare = cancel
	l.mu.Unlock()
	return ctx, func() {
		l.mu.Lock()
		cl.cancelPrepare = nil
		l.unref(uid, cl)
		l.mu.Unlock()
		cancel(nil)
		cl.run.Unlock()
	}, nil
}

// Unprepare takes the claim's lock for an unprepare, stopping the claim's prepare in progress,
// and returns the release function.
func (l *Locks) Unprepare(uid types.UID) func() {
	l.mu.Lock()
	cl := l.ref(uid)
	cl.unprepares++
	if cl.cancelPrepare != nil {
		cl.cancelPrepare(ErrUnpreparedMeanwhile)
	}
	l.mu.Unlock()

	cl.run.Lock()
	return func() {
		l.mu.Lock()
		cl.unprepares++
		l.unref(uid, cl)
		l.mu.Unlock()
		cl.run.Unlock()
	}
}
