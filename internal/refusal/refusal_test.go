package refusal

import (
	"errors"
	"fmt"
	"testing"
)

type ownRefusal struct{}

func (ownRefusal) Error() string { return "refused by a type of its own" }
func (ownRefusal) Refusal()      {}

func TestIs(t *testing.T) {
	base := errors.New("namespace a is labelled for control plane \"b\"")
	cases := map[string]struct {
		err  error
		want bool
	}{
		"nil":                       {err: nil},
		"a plain error":             {err: base},
		"Errorf":                    {err: Errorf("not destroying: %w", base), want: true},
		"Wrap":                      {err: Wrap(base), want: true},
		"wrapped again":             {err: fmt.Errorf("install: %w", Wrap(base)), want: true},
		"joined with a plain error": {err: errors.Join(errors.New("other"), Wrap(base)), want: true},
		"a type with Refusal":       {err: fmt.Errorf("assign: %w", ownRefusal{}), want: true},
		"only a refusal's message":  {err: errors.New(Wrap(base).Error())},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Is(tc.err); got != tc.want {
				t.Errorf("Is(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
	if Wrap(nil) != nil {
		t.Error("Wrap(nil) is not nil")
	}
	if got := Errorf("x %w", base); !errors.Is(got, base) || got.Error() != "x "+base.Error() {
		t.Errorf("Errorf: %v, want it to wrap and say %q", got, "x "+base.Error())
	}
}
