package testutil

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Eventually polls cond every 50ms until it returns true, failing the test after timeout with
// what and the last error cond returned.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not true after %s (last error: %v)", what, timeout, last)
	}
}

// Consistently checks cond every 50ms for the whole window, failing the test with what and
// cond's error the first time it returns false: for "nothing happens" checks, the window named.
func Consistently(t testing.TB, window time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(window)
	for {
		if ok, err := cond(); !ok {
			t.Fatalf("%s: stopped holding within %s (%v)", what, window, err)
		}
		if !time.Now().Before(deadline) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// RunManager starts mgr and returns a function that stops it and waits for it to return; the
// function also runs when the test ends, and is safe to call more than once.
func RunManager(t testing.TB, mgr manager.Manager) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("controller manager: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
