package imexsim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLinkRetryMax: the wait between attempts to reach a peer is capped at 500 ms unless
// LinkRetryMaxEnv says otherwise; a value that is not a positive duration is refused, naming it.
func TestLinkRetryMax(t *testing.T) {
	si, err := standInsFrom(envLookup(nil))
	if err != nil || si.linkBackoffCap() != maxLinkBackoff {
		t.Errorf("unset: cap %s (err %v), want %s", si.linkBackoffCap(), err, maxLinkBackoff)
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

// TestShutdownDelaySetting: a containerized IMEX waits DefaultShutdownDelay unless
// ShutdownDelayEnv says otherwise; outside a container none unless it says so; a value that is
// not a duration of 0 or more is refused, naming it.
func TestShutdownDelaySetting(t *testing.T) {
	view := ContainerPathsEnv + "={}"
	for name, tc := range map[string]struct {
		env  []string
		want time.Duration
	}{
		"in a container":          {env: []string{view}, want: DefaultShutdownDelay},
		"set in a container":      {env: []string{view, ShutdownDelayEnv + "=5s"}, want: 5 * time.Second},
		"0 in a container":        {env: []string{view, ShutdownDelayEnv + "=0"}},
		"outside a container":     {},
		"set outside a container": {env: []string{ShutdownDelayEnv + "=2s"}, want: 2 * time.Second},
	} {
		si, err := standInsFrom(envLookup(tc.env))
		if err != nil || si.stopDelay() != tc.want {
			t.Errorf("%s: delay %s (err %v), want %s", name, si.stopDelay(), err, tc.want)
		}
	}
	for _, bad := range []string{"soon", "-1s", "3"} {
		_, err := standInsFrom(envLookup([]string{ShutdownDelayEnv + "=" + bad}))
		if err == nil || !strings.Contains(err.Error(), ShutdownDelayEnv) || !strings.Contains(err.Error(), bad) {
			t.Errorf("%q: %v, want an error naming %s and the value", bad, err, ShutdownDelayEnv)
		}
	}
}

// A node's ShutdownDelayPath wins over the environment's delay, read at each stop.
func TestStopDelayFromTheNode(t *testing.T) {
	node := t.TempDir()
	si := standIns{nodeDir: node, shutdownDelay: time.Second, shutdownDelaySet: true}
	if got := si.stopDelay(); got != time.Second {
		t.Errorf("without the node's file: %s, want 1s", got)
	}
	p := si.onNode(ShutdownDelayPath)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	for content, want := range map[string]time.Duration{"20s\n": 20 * time.Second, "0": 0, "soon": time.Second, "-1s": time.Second} {
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := si.stopDelay(); got != want {
			t.Errorf("node file %q: %s, want %s", content, got, want)
		}
	}
}
