package readiness

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestWaitForSyncOutlastsASlowAPIServer: a cache that syncs only after several report periods
// is waited for (no deadline of the plugin's own), and a stopped plugin stops waiting with an
// error that says what it waited for and why it stopped.
func TestWaitForSyncOutlastsASlowAPIServer(t *testing.T) {
	calls := 0
	synced := func(ctx context.Context) bool {
		calls++
		if calls < 4 {
			<-ctx.Done() // the apiserver has not answered within this period
			return false
		}
		return true
	}
	if err := WaitForSync(t.Context(), synced, 10*time.Millisecond); err != nil {
		t.Fatalf("WaitForSync: %v", err)
	}
	if calls != 4 {
		t.Errorf("synced called %d times, want 4 (three periods waited, then synced)", calls)
	}

	// The plugin stops during its third period of waiting.
	stop := errors.New("the plugin is stopping")
	ctx, cancel := context.WithCancelCause(t.Context())
	periods := 0
	err := WaitForSync(ctx, func(ctx context.Context) bool {
		if periods++; periods == 3 {
			cancel(stop)
		}
		<-ctx.Done()
		return false
	}, 10*time.Millisecond)
	if !errors.Is(err, stop) || !strings.Contains(err.Error(), "did not sync") {
		t.Errorf("WaitForSync after the plugin stopped: %v, want an error saying the cache did not sync because %v", err, stop)
	}
}
