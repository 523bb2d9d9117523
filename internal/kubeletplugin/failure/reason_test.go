package failure

import (
	"errors"
	"fmt"
	"testing"
)

func TestReasonOf(t *testing.T) {
	base := errors.New("boom")
	cases := map[string]struct {
		err           error
		want          Reason
		wantPermanent bool
	}{
		"untagged":             {err: base, want: Other},
		"tagged":               {err: Tag(CDI, base), want: CDI},
		"wrapped after tagged": {err: fmt.Errorf("claim x: %w", Tag(Checkpoint, base)), want: Checkpoint},
		"first tag wins":       {err: Tag(Other, fmt.Errorf("step: %w", Tag(CDI, base))), want: CDI},
		"permanent kept":       {err: Tag(BadConfig, Permanentf("bad")), want: BadConfig, wantPermanent: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ReasonOf(tc.err); got != tc.want {
				t.Errorf("ReasonOf = %q, want %q", got, tc.want)
			}
			if got := IsPermanent(tc.err); got != tc.wantPermanent {
				t.Errorf("IsPermanent = %v, want %v", got, tc.wantPermanent)
			}
		})
	}
	if Tag(CDI, nil) != nil {
		t.Error("Tag(reason, nil) is not nil")
	}
	if got, want := Tag(BadConfig, Permanentf("bad")).Error(), "permanent error: bad"; got != want {
		t.Errorf("message %q, want %q: a tag must not change what the kubelet sees", got, want)
	}
}
