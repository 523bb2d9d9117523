package imexsim

import (
	"strings"
	"testing"
	"time"
)

// TestLinkRetryMax: the wait between attempts to reach a peer is capped at 500 ms unless
// LinkRetryMaxEnv says otherwise; a value that is not a positive duration is refused, naming it.
func TestLinkRetryMax(t *testing.T) {
	si, err := standInsFrom(envLookup(nil))
	if err != nil || si.linkBackoffCap() != linkBackoffMax {
		t.Errorf("unset: cap %s (err %v), want %s", si.linkBackoffCap(), err, linkBackoffMax)
	}
	si, err = standInsFrom(envLookup([]string{LinkRetryMaxEnv + "=5s"}))
	if err != nil || si.linkBackoffCap() != 5*time.Second {
		t.Errorf("5s: cap %s (err %v), want 5s", si.linkBackoffCap(), err)
	}
	for _, bad := range []string{"soon", "0s", "-1s"} {
		_, err := standInsFrom(envLookup([]string{LinkRetryMaxEnv + "=" + bad}))
		if err == nil || !strings.Contains(err.Error(), LinkRetryMaxEnv) || !strings.Contains(err.Error(), bad) {
			t.Errorf("%q: %v, want an error naming %s and the value", bad, err, LinkRetryMaxEnv)
		}
	}
}
