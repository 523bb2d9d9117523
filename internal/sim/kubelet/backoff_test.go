package kubelet

import (
	"testing"
	"time"
)

func TestBackoffNext(t *testing.T) {
	b := Backoff{Initial: 10 * time.Second, Max: time.Minute, ResetAfter: 10 * time.Minute}
	for name, tc := range map[string]struct {
		prev, ran, want time.Duration
	}{
		"first":             {prev: 0, ran: 0, want: 10 * time.Second},
		"doubles":           {prev: 10 * time.Second, ran: time.Second, want: 20 * time.Second},
		"capped":            {prev: 40 * time.Second, ran: time.Second, want: time.Minute},
		"stays capped":      {prev: time.Minute, ran: time.Minute, want: time.Minute},
		"reset after a run": {prev: time.Minute, ran: 10 * time.Minute, want: 10 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			if got := b.Next(tc.prev, tc.ran); got != tc.want {
				t.Errorf("Next(%s, %s) = %s, want %s", tc.prev, tc.ran, got, tc.want)
			}
		})
	}
}

func TestBackoffDefaults(t *testing.T) {
	got := Backoff{Initial: time.Second}.orDefault(DefaultRestartBackoff)
	want := Backoff{Initial: time.Second, Max: DefaultRestartBackoff.Max, ResetAfter: DefaultRestartBackoff.ResetAfter}
	if got != want {
		t.Errorf("orDefault = %+v, want %+v", got, want)
	}
}
