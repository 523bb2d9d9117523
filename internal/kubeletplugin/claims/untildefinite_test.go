package claims

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestUntilDefinite: transient errors are tried again until an answer (success or NotFound),
// which is returned as it is; a context that ends first returns the last error with it.
func TestUntilDefinite(t *testing.T) {
	notFound := apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, "c")
	transient := errors.New(`Get "https://127.0.0.1/...": net/http: TLS handshake timeout`)
	for name, tc := range map[string]struct {
		answers   []error // what get returns, call after call (the last one from then on)
		wantErr   error
		wantCalls int
	}{
		"success at once":               {answers: []error{nil}, wantCalls: 1},
		"NotFound at once":              {answers: []error{notFound}, wantErr: notFound, wantCalls: 1},
		"two transient errors, then ok": {answers: []error{transient, transient, nil}, wantCalls: 3},
		"a transient error, then gone":  {answers: []error{transient, notFound}, wantErr: notFound, wantCalls: 2},
	} {
		t.Run(name, func(t *testing.T) {
			calls := 0
			err := untilDefinite(context.Background(), "test", time.Millisecond, func() error {
				a := tc.answers[min(calls, len(tc.answers)-1)]
				calls++
				return a
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
			if calls != tc.wantCalls {
				t.Errorf("%d calls, want %d", calls, tc.wantCalls)
			}
		})
	}

	t.Run("context ends first", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		calls := 0
		err := untilDefinite(ctx, "test", time.Millisecond, func() error {
			if calls++; calls == 3 {
				cancel()
			}
			return transient
		})
		if !errors.Is(err, transient) || !errors.Is(err, context.Canceled) {
			t.Errorf("error %v, want the last error and the context's", err)
		}
		if calls != 3 {
			t.Errorf("%d calls, want 3 (none after the context ended)", calls)
		}
	})
}

// TestUntilDefiniteBackoff: the waits between tries double from the first, up to
// maxDefiniteWait, and stay there.
func TestUntilDefiniteBackoff(t *testing.T) {
	b := definiteBackoff(time.Second)
	var got []time.Duration
	for range 8 {
		got = append(got, b.Step())
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, maxDefiniteWait, maxDefiniteWait, maxDefiniteWait}
	if !slices.Equal(got, want) {
		t.Errorf("waits %v, want %v", got, want)
	}
}
