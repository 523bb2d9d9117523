package kubelet

import "time"

// Backoff is a capped exponential delay, as the kubelet uses between container restarts.
type Backoff struct {
	// Initial is the first delay.
	Initial time.Duration
	// Max caps the delay.
	Max time.Duration
	// ResetAfter: a container that ran at least this long starts again from Initial.
	ResetAfter time.Duration
}

// DefaultRestartBackoff is the kubelet's: 10s doubling to 5m, reset after 10 minutes of running.
var DefaultRestartBackoff = Backoff{Initial: 10 * time.Second, Max: 5 * time.Minute, ResetAfter: 10 * time.Minute}

// DefaultPrepareBackoff spaces retries of a failing NodePrepareResources call.
var DefaultPrepareBackoff = Backoff{Initial: time.Second, Max: 30 * time.Second}

// Next returns the delay before the next attempt, given the previous delay (0 for none yet)
// and how long the last attempt ran.
func (b Backoff) Next(prev, ran time.Duration) time.Duration {
	if prev <= 0 || (b.ResetAfter > 0 && ran >= b.ResetAfter) {
		return min(b.Initial, b.Max)
	}
	return min(2*prev, b.Max)
}

// orDefault returns b, or def where b is unset.
func (b Backoff) orDefault(def Backoff) Backoff {
	if b.Initial <= 0 {
		b.Initial = def.Initial
	}
	if b.Max <= 0 {
		b.Max = def.Max
	}
	if b.ResetAfter <= 0 {
		b.ResetAfter = def.ResetAfter
	}
	return b
}
