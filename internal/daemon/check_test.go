package daemon

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"cdplane/internal/imex"
)

// TestCheck: the readiness probe passes on a node without a fabric whatever IMEX answers, and
// on a node with one only when IMEX answers Ready; a not-ready IMEX, or IMEX found unable to
// run here, fails it with a message the kubelet shows on the pod.
func TestCheck(t *testing.T) {
	cases := map[string]struct {
		cliqueID string
		ready    bool
		blocked  string // the reason recorded at Config.BlockedPath; empty: none
		wantErr  string // empty: the check passes
		// wantNotReady: the error wraps imex.ErrNotReady, as IMEX's answer does.
		wantNotReady bool
	}{
		"IMEX ready":                  {cliqueID: "c.1", ready: true},
		"IMEX answers not ready":      {cliqueID: "c.1", wantErr: "the fake answers NOT_READY", wantNotReady: true},
		"no fabric, IMEX not running": {cliqueID: ""},
		"IMEX blocked, though Ready": {cliqueID: "c.1", ready: true, blocked: "HostIMEXInUse: a host service holds the session",
			wantErr: "IMEX cannot run on this node: HostIMEXInUse: a host service holds the session"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := Config{CliqueID: tc.cliqueID, ConfigDir: t.TempDir()}
			if tc.blocked != "" {
				if err := os.WriteFile(cfg.BlockedPath(), []byte(tc.blocked+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			x := newFakeIMEX()
			x.setReady(tc.ready)
			err := Check(context.Background(), cfg, x)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Check = %v, want it to pass", err)
			case tc.wantErr == "":
			case err == nil:
				t.Fatalf("Check passed, want an error containing %q", tc.wantErr)
			case !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("Check = %q, want an error containing %q", err, tc.wantErr)
			case tc.wantNotReady && !errors.Is(err, imex.ErrNotReady):
				t.Fatalf("Check = %v, want it to wrap imex.ErrNotReady", err)
			case strings.Count(err.Error(), "not ready") > 1:
				t.Fatalf("Check = %q says it twice (the probe's message the kubelet shows on the pod)", err)
			}
		})
	}
}
