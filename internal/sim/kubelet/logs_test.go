package kubelet

import (
	"bytes"
	"strings"
	"testing"
)

func TestTailOffset(t *testing.T) {
	for name, tc := range map[string]struct {
		text string
		n    int64
		want string
	}{
		"empty":                 {text: "", n: 2, want: ""},
		"zero lines":            {text: "a\nb\n", n: 0, want: ""},
		"last two":              {text: "a\nb\nc\n", n: 2, want: "b\nc\n"},
		"more than there are":   {text: "a\nb\n", n: 5, want: "a\nb\n"},
		"no final newline":      {text: "a\nb\nc", n: 1, want: "c"},
		"exactly all":           {text: "a\nb\n", n: 2, want: "a\nb\n"},
		"long lines (chunking)": {text: strings.Repeat("x", 40000) + "\n" + strings.Repeat("y", 70000) + "\n", n: 1, want: strings.Repeat("y", 70000) + "\n"},
	} {
		t.Run(name, func(t *testing.T) {
			r := bytes.NewReader([]byte(tc.text))
			off, err := tailOffset(r, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.text[off:]; got != tc.want {
				t.Errorf("tail %d of %q = %q, want %q", tc.n, tc.text, got, tc.want)
			}
		})
	}
}
