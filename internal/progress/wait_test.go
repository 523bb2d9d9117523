package progress

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestWait(t *testing.T) {
	defer func(c time.Duration) { changedEvery = c }(changedEvery)
	changedEvery = 0
	var out strings.Builder
	n := 0
	err := Wait(context.Background(), &out, time.Minute, time.Millisecond, "three polls", func(context.Context) (bool, string, error) {
		n++
		return n == 3, "poll " + string(rune('0'+n)), nil
	})
	if err != nil || n != 3 {
		t.Fatalf("err %v after %d polls", err, n)
	}
	for _, want := range []string{"Waiting for three polls\n", "  poll 1 (", "  poll 2 (", "  done after "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	err = Wait(context.Background(), &out, 20*time.Millisecond, time.Millisecond, "never", func(context.Context) (bool, string, error) {
		return false, "still not", nil
	})
	if err == nil || !strings.Contains(err.Error(), "timed out after 20ms waiting for never (last: still not)") {
		t.Errorf("timeout: %v", err)
	}

	// Stopped from outside (a signal): said as such, with the cause, not as this wait's timeout.
	ctx, cancel := context.WithCancelCause(context.Background())
	interrupt := errors.New("interrupt")
	polls := 0
	err = Wait(ctx, &out, time.Hour, time.Millisecond, "a stopped wait", func(context.Context) (bool, string, error) {
		if polls++; polls == 2 {
			cancel(interrupt)
		}
		return false, "still not", nil
	})
	if !errors.Is(err, interrupt) || !strings.Contains(err.Error(), "stopped after") || strings.Contains(err.Error(), "timed out") {
		t.Errorf("interrupted: %v, want it stopped with the cause", err)
	}

	boom := errors.New("boom")
	err = Wait(context.Background(), &out, time.Minute, time.Millisecond, "failing", func(context.Context) (bool, string, error) {
		return false, "", boom
	})
	if !errors.Is(err, boom) {
		t.Errorf("a failing condition: %v, want it wrapped", err)
	}

	// Changes faster than changedEvery are not all printed; the first is.
	changedEvery = time.Hour
	out.Reset()
	n = 0
	if err := Wait(context.Background(), &out, time.Minute, time.Millisecond, "fast", func(context.Context) (bool, string, error) {
		n++
		return n == 3, "poll " + string(rune('0'+n)), nil
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "  poll 1 (") || strings.Contains(out.String(), "poll 2") {
		t.Errorf("throttled output: want poll 1 and not poll 2:\n%s", out.String())
	}
}
