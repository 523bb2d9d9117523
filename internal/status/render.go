package status

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

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
		name := pl.ID
		if pl.Legacy {
			name, legacy = LegacyName, true
		}
		version, controller := pl.Version, fmt.Sprintf("%d/%d", pl.Controller.Ready, pl.Controller.Desired)
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
	leader, age = l.Holder, "-"
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
	fmt.Fprintf(w, "ComputeDomain %s/%s (uid %s), control plane %s, driver namespace %s\n", d.Namespace, d.Name, d.UID, planeName, d.DriverNamespace)
	fmt.Fprintf(w, "Status: %s  numNodes: %d  readyNodes: %d  totalNodes: %d  membership: %s\n",
		paint(orDash(d.Status), d.Status, opts), d.NumNodes, d.ReadyNodes, d.TotalNodes, d.Membership)

	fmt.Fprintln(w)
	if len(d.Cliques) == 0 {
		fmt.Fprintln(w, "No node has joined the domain.")
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CLIQUE\tREADY\tNODES")
		for _, c := range d.Cliques {
			id := c.ID
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
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", h.Node, h.Reason, h.Message)
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
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, c.Message)
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
	return paint(n.Name+"["+idx+"]"+mark, n.Status, opts)
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
