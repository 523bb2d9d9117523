package status

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/duration"

	cdv1beta1 "cdplane/api/v1beta1"
)

// Options shape the text output.
type Options struct {
	// Color colours node cells and statuses (green Ready, red NotReady, yellow anything else).
	Color bool
}

const (
	green  = "\x1b[32m"
	red    = "\x1b[31m"
	yellow = "\x1b[33m"
	reset  = "\x1b[0m"
)

// LegacyName is how the text output names the legacy plane.
const LegacyName = "(legacy)"

// printable returns s fit for a terminal: what others wrote into the cluster (an event's or a
// condition's message, a lease holder) is printed, never interpreted. Tabs and line breaks become
// spaces (they would break the table), other control characters (an escape sequence could
// move the cursor, rewrite the screen or set the window title) and the Unicode controls that
// reorder text are shown as escapes (\x1b, \u202e).
func printable(s string) string {
	clean := true
	for _, r := range s {
		if unprintable(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1: // not UTF-8: the byte itself
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case r == '\t' || r == '\n' || r == '\r':
			b.WriteByte(' ')
		case r < 0x100 && unprintable(r):
			fmt.Fprintf(&b, "\\x%02x", r)
		case unprintable(r):
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
		i += size
	}
	return b.String()
}

// unprintable: C0 and C1 controls, DEL, invalid UTF-8, and the bidirectional formatting
// characters (U+061C, U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069).
func unprintable(r rune) bool {
	switch {
	case unicode.IsControl(r), r == utf8.RuneError:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// WriteJSON writes v as indented JSON and a newline.
func WriteJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WritePlanesText writes one row per plane.
func WritePlanesText(w io.Writer, p Planes, _ Options) error {
	if len(p.Planes) == 0 {
		_, err := fmt.Fprintln(w, "No control plane found: no cdplane controller Deployment, and no plane label on nodes, namespaces or ComputeDomains.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PLANE\tVERSION\tCONTROLLER\tNODES\tPLUGIN-READY\tNAMESPACES\tDOMAINS-READY\tDOMAINS-NOT-READY\tLEADER\tLEADER-AGE")
	legacy := false
	for _, pl := range p.Planes {
		name := printable(pl.ID)
		if pl.Legacy {
			name, legacy = LegacyName, true
		}
		version, controller := printable(pl.Version), fmt.Sprintf("%d/%d", pl.Controller.Ready, pl.Controller.Desired)
		if !pl.Installed {
			version, controller = "(not installed)", "-"
		}
		leader, age := leaderCells(pl.Leader)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", name, orDash(version), controller,
			pl.Nodes, pl.NodesPluginReady, pl.Namespaces, pl.Domains.Ready, pl.Domains.NotReady, leader, age)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if legacy {
		_, err := fmt.Fprintln(w, "(legacy): NODES counts the nodes running its kubelet plugin, NAMESPACES the namespaces without a plane label that hold its domains.")
		return err
	}
	return nil
}

func leaderCells(l *Leader) (leader, age string) {
	switch {
	case l == nil:
		return "-", "-"
	case !l.Election:
		return "(election off)", "-"
	case l.Holder == "":
		return "(none)", "-"
	}
	leader, age = printable(l.Holder), "-"
	if l.Expired {
		leader += " (expired)"
	}
	if l.AcquireTime != nil {
		age = duration.HumanDuration(time.Duration(l.AgeSeconds) * time.Second)
	}
	return leader, age
}

// WriteDomainText writes the domain's header, its cliques (one row each, one cell per node:
// name[index] and a mark, ✓ Ready, ✗ NotReady, … anything else), the nodes holding it back
// with why, and its conditions.
func WriteDomainText(w io.Writer, d Domain, opts Options) error {
	planeName := LegacyName
	if d.ControlPlaneID != "" {
		planeName = strconv.Quote(d.ControlPlaneID)
	}
	fmt.Fprintf(w, "ComputeDomain %s/%s (uid %s), control plane %s, driver namespace %s\n",
		printable(d.Namespace), printable(d.Name), printable(string(d.UID)), planeName, printable(d.DriverNamespace))
	fmt.Fprintf(w, "Status: %s  numNodes: %d  readyNodes: %d  totalNodes: %d  membership: %s\n",
		paint(orDash(printable(d.Status)), d.Status, opts), d.NumNodes, d.ReadyNodes, d.TotalNodes, printable(d.Membership))

	fmt.Fprintln(w)
	if len(d.Cliques) == 0 {
		fmt.Fprintln(w, "No node has joined the domain.")
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CLIQUE\tREADY\tNODES")
		for _, c := range d.Cliques {
			id := printable(c.ID)
			if id == "" {
				id = "(no fabric)"
			}
			cells := make([]string, len(c.Nodes))
			for i, n := range c.Nodes {
				cells[i] = nodeCell(n, opts)
			}
			fmt.Fprintf(tw, "%s\t%d/%d\t%s\n", id, c.Ready, c.Total, strings.Join(cells, " "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	fmt.Fprintln(w)
	if len(d.HeldBack) == 0 {
		fmt.Fprintln(w, "Held back: none")
	} else {
		fmt.Fprintf(w, "Held back (%d):\n", len(d.HeldBack))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, h := range d.HeldBack {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", printable(h.Node), printable(h.Reason), printable(h.Message))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	fmt.Fprintln(w)
	if len(d.Conditions) == 0 {
		_, err := fmt.Fprintln(w, "Conditions: none reported yet")
		return err
	}
	fmt.Fprintln(w, "Conditions:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  TYPE\tSTATUS\tREASON\tMESSAGE")
	for _, c := range d.Conditions {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", printable(c.Type), printable(c.Status), printable(c.Reason), printable(c.Message))
	}
	return tw.Flush()
}

// nodeCell is "name[index]mark", index "-" without a fabric.
func nodeCell(n Node, opts Options) string {
	idx := strconv.Itoa(n.Index)
	if n.Index < 0 {
		idx = "-"
	}
	mark := "…"
	switch n.Status {
	case cdv1beta1.StatusReady:
		mark = "✓"
	case cdv1beta1.StatusNotReady:
		mark = "✗"
	}
	return paint(printable(n.Name)+"["+idx+"]"+mark, n.Status, opts)
}

// paint colours s by status when colour is on.
func paint(s, status string, opts Options) string {
	if !opts.Color {
		return s
	}
	c := yellow
	switch status {
	case cdv1beta1.StatusReady:
		c = green
	case cdv1beta1.StatusNotReady:
		c = red
	}
	return c + s + reset
}
