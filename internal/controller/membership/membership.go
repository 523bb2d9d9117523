// Package membership computes ComputeDomain membership from what the cluster shows: the daemon
// pods (node, IP, clique label, readiness), the nodes carrying the domain's label, and the entries
// written before. It is pure: the controller reads, calls Compute and Aggregate, and writes.
package membership

import (
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"

	cdv1beta1 "cdplane/api/v1beta1"
)

// Entry is one node's membership entry, as stored in cliques and status.nodes.
type Entry = cdv1beta1.ComputeDomainDaemonInfo

// Pod is what the controller reads from one daemon pod.
type Pod struct {
	NodeName string
	IP       string
	// CliqueID is the value of the pod's clique label; "" for a node without a fabric.
	CliqueID string
	// Labelled is false until the daemon has labelled its pod with its clique.
	Labelled    bool
	Ready       bool
	Terminating bool
	Created     time.Time
	// Owned is true when the pod's controller owner reference is the domain's daemon DaemonSet
	// (by UID). Only such pods are the domain's daemons; any other pod is ignored.
	Owned bool
	// Blocked is the value of the pod's IMEXBlockedLabel: why its daemon cannot run IMEX; ""
	// when it can.
	Blocked string
}

// Input is everything Compute needs.
type Input struct {
	// Existing entries, one per node (cliques take precedence over status.nodes when merging).
	Existing []Entry
	// Pods are the domain's daemon pods.
	Pods []Pod
	// LabelledNodes are the nodes carrying the domain's node label.
	LabelledNodes sets.Set[string]
	// AllocatedNodes are the nodes on which the scheduler allocated a channel claim of the
	// domain. A node is a member only when it is in both sets: the label alone is something a
	// compromised node could set on itself; an allocation only the scheduler writes.
	AllocatedNodes sets.Set[string]
	// MaxNodes bounds indexes within a clique: 0 <= index < MaxNodes.
	MaxNodes int
	// StatusOnly says membership lives in status.nodes only (ComputeDomainCliques off), so that
	// an entry left out of it is lost. Then every existing entry is kept, and a new node is
	// admitted (in node-name order) only while the entries fit status.nodes: at most
	// MaxStatusNodes entries and MaxStatusBytes estimated bytes; the rest wait in
	// Result.Overflow.
	StatusOnly bool
}

// Result is the membership to write.
type Result struct {
	// Cliques maps clique ids to their entries, sorted by node name. Nodes without a fabric are
	// not in it.
	Cliques map[string][]Entry
	// Fabricless lists entries of nodes without a fabric (index -1, empty clique), by node name.
	Fabricless []Entry
	// Waiting maps clique ids to nodes that could not get an index because the clique is full.
	Waiting map[string][]string
	// Withheld lists nodes kept out, by node name: their daemon pod carries a clique label that
	// is not a valid clique id (cdv1beta1.ValidateCliqueID), or an address another member of the
	// domain holds. A withheld node that had an entry keeps it, not ready, as when its daemon is
	// restarting (for an address in use, without the address).
	Withheld []Withheld
	// Blocked lists member nodes whose daemon reports IMEX blocked (Pod.Blocked), by node name.
	Blocked []Blocked
	// Overflow lists nodes that would join but do not fit status.nodes, by node name: new nodes
	// when StatusOnly, and, set by Aggregate, fabric-less nodes of a domain too large for
	// status.nodes that do not fit it.
	Overflow []string
	// StatusOnly is Input.StatusOnly.
	StatusOnly bool
}

// Withheld is a node kept out of the domain, and why.
type Withheld struct {
	Node string
	// Reason is cdv1beta1.ReasonInvalidCliqueLabel or cdv1beta1.ReasonAddressInUse.
	Reason string
	// Value is what is to blame: the clique label's value, or the address.
	Value string
	// Holder is the node that holds the address (ReasonAddressInUse).
	Holder string
}

// Blocked is a node whose daemon cannot run IMEX, and why (a cdv1beta1.IMEXBlockedLabel value).
type Blocked struct {
	Node   string
	Reason string
}

// validCliqueIDs returns a check of clique ids (cdv1beta1.ValidateCliqueID) that validates each
// distinct id once: a pass sees every node's id, a domain has a few ids each shared by up to 18
// nodes, and the validation's regular expressions, run for every node, were a sizeable share of
// the controller's passes' CPU in a large burst (BenchmarkCompute; see docs/scale.md, "Design
// choices and what was measured").
func validCliqueIDs() func(string) bool {
	seen := map[string]bool{}
	return func(id string) bool {
		ok, known := seen[id]
		if !known {
			ok = cdv1beta1.ValidateCliqueID(id) == nil
			seen[id] = ok
		}
		return ok
	}
}

// Compute derives membership. A node keeps its entry and index for as long as it carries the
// domain's label, whatever happens to its daemon pod; a node that lost the label loses its entry;
// a new node, or one whose clique changed, gets the lowest free index in its clique, in node-name
// order so that the result does not depend on the order of the input.
func Compute(in Input) Result {
	pods := pickPods(in.Pods)
	existing := make(map[string]Entry, len(in.Existing))
	for _, e := range in.Existing {
		existing[e.NodeName] = e
	}

	res := Result{Cliques: map[string][]Entry{}, Waiting: map[string][]string{}, StatusOnly: in.StatusOnly}
	validID := validCliqueIDs()
	var known, joining []Entry
	for _, node := range sets.List(in.LabelledNodes) {
		if !in.AllocatedNodes.Has(node) {
			continue // labelled, but no channel claim of the domain was allocated on it
		}
		pod, hasPod := pods[node]
		old, hadEntry := existing[node]
		if hadEntry && !validID(old.CliqueID) {
			hadEntry = false // an entry no clique can hold (written before ids were checked)
		}
		if hasPod && pod.Labelled {
			if !validID(pod.CliqueID) {
				res.Withheld = append(res.Withheld, Withheld{Node: node, Reason: cdv1beta1.ReasonInvalidCliqueLabel, Value: pod.CliqueID})
				pod.Labelled = false // as if its daemon had not labelled it yet
			}
		}
		if hasPod && pod.Blocked != "" {
			res.Blocked = append(res.Blocked, Blocked{Node: node, Reason: pod.Blocked})
		}
		var e Entry
		switch {
		case hasPod && pod.Labelled:
			e = Entry{NodeName: node, IPAddress: pod.IP, CliqueID: pod.CliqueID, Index: cdv1beta1.FabriclessIndex, Status: status(pod.Ready)}
		case hadEntry:
			// The daemon is gone or being replaced: keep the entry and its index, not ready,
			// with the address of the pod now on the node, none while there is none (the old
			// address may soon be another pod's, and the clique's daemons map only addresses
			// that are there).
			e = old
			e.Status = cdv1beta1.StatusNotReady
			e.IPAddress = ""
			if hasPod {
				e.IPAddress = pod.IP
			}
		default:
			continue // nothing known about this node yet
		}
		if hadEntry {
			known = append(known, e)
		} else {
			joining = append(joining, e)
		}
	}
	known, joining, res.Withheld = oneHolderPerAddress(known, joining, existing, pods, res.Withheld)
	if in.StatusOnly {
		joining, res.Overflow = admit(known, joining)
	}

	used := map[string]sets.Set[int]{}
	var needIndex []Entry
	for _, e := range append(known, joining...) {
		if e.CliqueID == "" {
			e.Index = cdv1beta1.FabriclessIndex
			res.Fabricless = append(res.Fabricless, e)
			continue
		}
		if used[e.CliqueID] == nil {
			used[e.CliqueID] = sets.New[int]()
		}
		old, hadEntry := existing[e.NodeName]
		if hadEntry && old.CliqueID == e.CliqueID && old.Index >= 0 && old.Index < in.MaxNodes &&
			!used[e.CliqueID].Has(old.Index) {
			e.Index = old.Index
			used[e.CliqueID].Insert(e.Index)
			res.Cliques[e.CliqueID] = append(res.Cliques[e.CliqueID], e)
			continue
		}
		needIndex = append(needIndex, e)
	}
	sortEntries(needIndex)
	for _, e := range needIndex {
		idx, ok := lowestFree(used[e.CliqueID], in.MaxNodes)
		if !ok {
			res.Waiting[e.CliqueID] = append(res.Waiting[e.CliqueID], e.NodeName)
			continue
		}
		e.Index = idx
		used[e.CliqueID].Insert(idx)
		res.Cliques[e.CliqueID] = append(res.Cliques[e.CliqueID], e)
	}
	for id := range res.Cliques {
		sortEntries(res.Cliques[id])
	}
	sortEntries(res.Fabricless)
	if len(res.Waiting) == 0 {
		res.Waiting = nil
	}
	return res
}

// oneHolderPerAddress leaves each address with one entry. A node's kubelet writes its pods'
// addresses, so a compromised node can give its daemon another member's address; every daemon
// drops all entries sharing an address (two IMEX peers cannot share one), which would cut the
// victim out too. So the entry that held the address before keeps it (then the older pod, then
// the node name); any other is withheld, named with the holder: a known member keeps its entry
// and index, not ready and without the address; a joining node does not join.
func oneHolderPerAddress(known, joining []Entry, existing map[string]Entry, pods map[string]Pod, withheld []Withheld) ([]Entry, []Entry, []Withheld) {
	byIP := map[string][]Entry{}
	for _, e := range append(append([]Entry(nil), known...), joining...) {
		if e.IPAddress != "" {
			byIP[e.IPAddress] = append(byIP[e.IPAddress], e)
		}
	}
	losers := map[string]string{} // node -> holder
	for ip, es := range byIP {
		if len(es) < 2 {
			continue
		}
		holder := es[0]
		for _, e := range es[1:] {
			if holdsBefore(e, holder, ip, existing, pods) {
				holder = e
			}
		}
		for _, e := range es {
			if e.NodeName != holder.NodeName {
				losers[e.NodeName] = holder.NodeName
			}
		}
	}
	if len(losers) == 0 {
		return known, joining, withheld
	}
	for i := range known {
		if h, ok := losers[known[i].NodeName]; ok {
			withheld = append(withheld, Withheld{Node: known[i].NodeName, Reason: cdv1beta1.ReasonAddressInUse, Value: known[i].IPAddress, Holder: h})
			known[i].IPAddress, known[i].Status = "", cdv1beta1.StatusNotReady
		}
	}
	kept := joining[:0:0]
	for _, e := range joining {
		if h, ok := losers[e.NodeName]; ok {
			withheld = append(withheld, Withheld{Node: e.NodeName, Reason: cdv1beta1.ReasonAddressInUse, Value: e.IPAddress, Holder: h})
			continue
		}
		kept = append(kept, e)
	}
	sort.Slice(withheld, func(i, j int) bool { return withheld[i].Node < withheld[j].Node })
	return known, kept, withheld
}

// holdsBefore says whether a has a better claim to address ip than b: it held it in the
// entries written before and b did not; else its pod is older; else its node name is lower.
func holdsBefore(a, b Entry, ip string, existing map[string]Entry, pods map[string]Pod) bool {
	aHeld, bHeld := existing[a.NodeName].IPAddress == ip, existing[b.NodeName].IPAddress == ip
	if aHeld != bHeld {
		return aHeld
	}
	ac, bc := pods[a.NodeName].Created, pods[b.NodeName].Created
	if !ac.Equal(bc) {
		return ac.Before(bc)
	}
	return a.NodeName < b.NodeName
}

// admit returns the joining entries that fit status.nodes next to the known ones (which are
// always kept: dropping one would lose a member's index), in node-name order, and the names of
// those that do not fit.
func admit(known, joining []Entry) (admitted []Entry, overflow []string) {
	b := newBudget()
	for _, e := range known {
		b.add(e)
	}
	for _, e := range joining {
		if !b.fits(e) {
			overflow = append(overflow, e.NodeName)
			continue
		}
		b.add(e)
		admitted = append(admitted, e)
	}
	return admitted, overflow
}

// pickPods returns one pod per node, of the pods the domain's DaemonSet owns: a running pod over a terminating one, a labelled one over
// one its daemon has not labelled yet, then the newest.
func pickPods(pods []Pod) map[string]Pod {
	out := make(map[string]Pod, len(pods))
	for _, p := range pods {
		if p.NodeName == "" || !p.Owned {
			continue
		}
		cur, ok := out[p.NodeName]
		if !ok || better(p, cur) {
			out[p.NodeName] = p
		}
	}
	return out
}

func better(a, b Pod) bool {
	if a.Terminating != b.Terminating {
		return !a.Terminating
	}
	if a.Labelled != b.Labelled {
		return a.Labelled
	}
	return a.Created.After(b.Created)
}

func lowestFree(used sets.Set[int], maxNodes int) (int, bool) {
	for i := range maxNodes {
		if !used.Has(i) {
			return i, true
		}
	}
	return 0, false
}

func status(ready bool) string {
	if ready {
		return cdv1beta1.StatusReady
	}
	return cdv1beta1.StatusNotReady
}

func sortEntries(entries []Entry) {
	sort.Slice(entries, func(i, j int) bool { return entries[i].NodeName < entries[j].NodeName })
}

// All returns every entry of the result (cliques and fabric-less), sorted by node name.
func (r Result) All() []Entry {
	var all []Entry
	for _, entries := range r.Cliques {
		all = append(all, entries...)
	}
	all = append(all, r.Fabricless...)
	sortEntries(all)
	return all
}
