package cli

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestEveryCommandHasAnExample: each command a user runs (runnable, not hidden, not a group
// that only prints its help) shows how, kubectl style: lines indented two spaces, each a
// cdplane invocation.
func TestEveryCommandHasAnExample(t *testing.T) {
	root := newRoot(io.Discard, io.Discard)
	var walk func(c *cobra.Command)
	checked := 0
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if !c.Runnable() || c.Hidden || (c.HasSubCommands() && c != root) || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		checked++
		if c.Example == "" {
			t.Errorf("%s: no Example", c.CommandPath())
			return
		}
		for _, line := range strings.Split(c.Example, "\n") {
			if !strings.HasPrefix(line, "  cdplane ") {
				t.Errorf("%s: Example line %q: want it indented two spaces and starting with cdplane", c.CommandPath(), line)
			}
		}
	}
	walk(root)
	if checked < 10 {
		t.Errorf("checked %d commands; the walk missed the tree", checked)
	}
}
