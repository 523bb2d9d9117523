package status

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

func TestWatch(t *testing.T) {
	cases := map[string]struct {
		opts     WatchOptions
		failOn   int // draw number (1-based) that fails; 0: none
		wantErr  bool
		wantOut  string
		wantRuns int
	}{
		"draws until cancelled, separated": {
			opts: WatchOptions{Interval: time.Millisecond, Separator: "--\n"}, wantRuns: 3,
			wantOut: "draw 1\n--\ndraw 2\n--\ndraw 3\n",
		},
		"clears a terminal before each draw": {
			opts: WatchOptions{Interval: time.Millisecond, Clear: true}, wantRuns: 2,
			wantOut: clearScreen + "draw 1\n" + clearScreen + "draw 2\n",
		},
		"a failed first draw is the error": {
			opts: WatchOptions{Interval: time.Millisecond}, failOn: 1, wantErr: true, wantRuns: 1,
		},
		"a later failure is shown and the watch goes on": {
			opts: WatchOptions{Interval: time.Millisecond, Separator: "--\n"}, failOn: 2, wantRuns: 3,
			wantOut: "draw 1\n--\n<time>: API down\n--\ndraw 3\n",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			runs := 0
			var out bytes.Buffer
			err := Watch(ctx, &out, tc.opts, func(_ context.Context, w io.Writer) error {
				runs++
				if runs == tc.failOn {
					return errors.New("API down")
				}
				fmt.Fprintf(w, "draw %d\n", runs)
				if runs == tc.wantRuns {
					cancel() // as an interrupt would, while the next draw waits
				}
				return nil
			})
			if (err != nil) != tc.wantErr {
				t.Fatalf("Watch: %v, want error %v", err, tc.wantErr)
			}
			if runs != tc.wantRuns {
				t.Errorf("%d draws, want %d", runs, tc.wantRuns)
			}
			got := out.String()
			if i := strings.Index(got, ": API down"); i >= 0 {
				start := strings.LastIndex(got[:i], "\n") + 1
				got = got[:start] + "<time>" + got[i:]
			}
			if got != tc.wantOut {
				t.Errorf("output %q, want %q", got, tc.wantOut)
			}
		})
	}
}
