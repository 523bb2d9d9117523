package membership

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdv1beta1 "cdplane/api/v1beta1"
)

// maxNamesInMessage bounds how many node names a condition message lists.
const maxNamesInMessage = 8

// Aggregate computes a ComputeDomain's membership status from the result of Compute: nodes
// (bounded by MaxStatusNodes and MaxStatusBytes), the per-clique summary, counts, status and the
// Ready, NodesInStatus and NodesWithheld conditions. Other conditions are carried over from prev.
//
// When every entry fits, status.nodes lists them all. When they do not, and cliques hold the
// membership, status.nodes lists only the nodes without a fabric (they are in no clique, and
// the kubelet plugin learns that they are Ready from status.nodes), as many as fit; with
// res.StatusOnly (cliques off) Compute admitted only what fits, and every entry is listed.
func Aggregate(res Result, numNodes int, generation int64, prev []metav1.Condition) cdv1beta1.ComputeDomainStatus {
	all := res.All()
	st := cdv1beta1.ComputeDomainStatus{Conditions: append([]metav1.Condition(nil), prev...)}
	var notReady []string
	for _, e := range all {
		if e.Status == cdv1beta1.StatusReady {
			st.ReadyNodes++
		} else {
			notReady = append(notReady, e.NodeName)
		}
	}
	st.TotalNodes = int32(len(all))
	st.Cliques = summarise(res)

	listed, overflow, nodesCond := nodesInStatus(res, all, generation)
	for _, e := range listed {
		st.Nodes = append(st.Nodes, cdv1beta1.ComputeDomainNode{
			Name: e.NodeName, IPAddress: e.IPAddress, CliqueID: e.CliqueID, Index: e.Index, Status: e.Status,
		})
	}

	ready := metav1.Condition{Type: cdv1beta1.ConditionReady, ObservedGeneration: generation}
	waiting := waitingNodes(res.Waiting)
	switch {
	case len(waiting) > 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, cdv1beta1.ReasonCliqueFull
		ready.Message = "no free IMEX index in the clique (raise --max-nodes-per-imex-domain or place fewer nodes per clique) for nodes: " + names(waiting)
	case len(overflow) > 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, cdv1beta1.ReasonStatusFull
		ready.Message = fmt.Sprintf("%d nodes wait for room in status.nodes (see condition %s): %s", len(overflow), cdv1beta1.ConditionNodesInStatus, names(overflow))
	case len(all) < numNodes:
		ready.Status, ready.Reason = metav1.ConditionFalse, cdv1beta1.ReasonWaitingForNodes
		ready.Message = fmt.Sprintf("%d of %d nodes have joined; waiting for the workload's pods to land on %d more", len(all), numNodes, numNodes-len(all))
	case len(notReady) > 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, cdv1beta1.ReasonDaemonsNotReady
		ready.Message = fmt.Sprintf("%d of %d daemons are not ready, on nodes: %s", len(notReady), len(all), names(notReady))
	default:
		ready.Status, ready.Reason = metav1.ConditionTrue, cdv1beta1.ReasonAllNodesReady
		ready.Message = fmt.Sprintf("all %d nodes are ready", len(all))
	}
	st.Status = cdv1beta1.StatusNotReady
	if ready.Status == metav1.ConditionTrue {
		st.Status = cdv1beta1.StatusReady
	}
	meta.SetStatusCondition(&st.Conditions, ready)
	meta.SetStatusCondition(&st.Conditions, nodesCond)
	meta.SetStatusCondition(&st.Conditions, withheldCondition(res.Withheld, generation))
	meta.SetStatusCondition(&st.Conditions, blockedCondition(res.Blocked, generation))
	return st
}

// blockedCondition is the NodesBlocked condition: True while a member's daemon reports that IMEX
// cannot run on its node. The reason is the daemons' when they all give the same known one
// (HostIMEXInUse), ReasonIMEXBlocked otherwise; the message names nodes and reasons.
func blockedCondition(blocked []Blocked, generation int64) metav1.Condition {
	c := metav1.Condition{
		Type: cdv1beta1.ConditionNodesBlocked, Status: metav1.ConditionFalse, Reason: cdv1beta1.ReasonNoneBlocked,
		Message: "no daemon reports IMEX blocked", ObservedGeneration: generation,
	}
	if len(blocked) == 0 {
		return c
	}
	reason := cdv1beta1.ReasonIMEXBlocked
	if first := blocked[0].Reason; (first == cdv1beta1.IMEXBlockedHostIMEXInUse || first == cdv1beta1.IMEXBlockedFabricError) &&
		!slices.ContainsFunc(blocked, func(b Blocked) bool { return b.Reason != first }) {
		reason = first
	}
	items := make([]string, len(blocked))
	for i, b := range blocked {
		items[i] = fmt.Sprintf("%s (%s)", b.Node, truncate(b.Reason, 64))
	}
	c.Status, c.Reason = metav1.ConditionTrue, reason
	c.Message = fmt.Sprintf("IMEX cannot run on %d nodes; their daemons do not retry: %s", len(blocked), names(items))
	if reason == cdv1beta1.ReasonFabricError {
		c.Message += "; their NVLink fabric registration failed, so they serve as nodes without NVLink fabric (CrashOnNVLinkFabricErrors is off): " +
			"see the FabricFailed events of their kubelet plugins"
	}
	if reason == cdv1beta1.ReasonHostIMEXInUse {
		c.Message += "; a host nvidia-imex service holds each node's IMEX session (NV_ERR_IN_USE): stop and disable it " +
			"(systemctl disable --now nvidia-imex), then delete the node's daemon pod, or run the plane with imex.mode=hostManaged"
	}
	return c
}

// nodesInStatus decides which entries status.nodes lists, which nodes wait for room in it, and
// the NodesInStatus condition that says so.
func nodesInStatus(res Result, all []Entry, generation int64) (listed []Entry, overflow []string, cond metav1.Condition) {
	cond = metav1.Condition{
		Type: cdv1beta1.ConditionNodesInStatus, Status: metav1.ConditionTrue, Reason: cdv1beta1.ReasonNodesListed,
		Message: "status.nodes lists every node of the domain", ObservedGeneration: generation,
	}
	b := newBudget()
	for _, e := range all {
		b.add(e)
	}
	overflow = append(overflow, res.Overflow...)
	switch {
	case res.StatusOnly && len(overflow) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, cdv1beta1.ReasonStatusFull
		cond.Message = fmt.Sprintf("membership lives in status.nodes (ComputeDomainCliques is off) and it is full at %d nodes (at most %d entries and %d estimated bytes); %d more wait and no member is dropped; turn ComputeDomainCliques on for larger domains",
			len(all), cdv1beta1.MaxStatusNodes, cdv1beta1.MaxStatusBytes, len(overflow))
		return all, overflow, cond
	case res.StatusOnly || b.within():
		return all, overflow, cond
	}
	// Too large: per-node data is in the cliques; fabric-less nodes, in none, are listed.
	fit := newBudget()
	for id := range res.Cliques {
		fit.addSummary(id)
	}
	for _, e := range res.Fabricless {
		if !fit.fits(e) {
			overflow = append(overflow, e.NodeName)
			continue
		}
		fit.add(e)
		listed = append(listed, e)
	}
	cond.Status, cond.Reason = metav1.ConditionFalse, cdv1beta1.ReasonTooManyNodes
	cond.Message = fmt.Sprintf("the domain's %d nodes do not fit status.nodes (at most %d entries and %d estimated bytes); it lists only the %d nodes without an NVLink fabric, and per-node data of the others is in the domain's ComputeDomainCliques",
		len(all), cdv1beta1.MaxStatusNodes, cdv1beta1.MaxStatusBytes, len(listed))
	return listed, overflow, cond
}

// withheldCondition is the NodesWithheld condition: True, naming nodes and values, while any
// daemon pod carries an invalid clique label.
func withheldCondition(withheld []Withheld, generation int64) metav1.Condition {
	c := metav1.Condition{
		Type: cdv1beta1.ConditionNodesWithheld, Status: metav1.ConditionFalse, Reason: cdv1beta1.ReasonNoneWithheld,
		Message: "no node is withheld", ObservedGeneration: generation,
	}
	if len(withheld) == 0 {
		return c
	}
	var labels, addresses []string
	for _, w := range withheld {
		if w.Reason == cdv1beta1.ReasonAddressInUse {
			addresses = append(addresses, fmt.Sprintf("%s (%s, held by %s)", w.Node, truncate(w.Value, 64), w.Holder))
		} else {
			labels = append(labels, fmt.Sprintf("%s (%q)", w.Node, truncate(w.Value, 64)))
		}
	}
	var parts []string
	if len(labels) > 0 {
		parts = append(parts, fmt.Sprintf("%d nodes are withheld: their daemon pod's label %s is not a valid clique id (lower-case DNS subdomain of at most 63 characters): %s",
			len(labels), cdv1beta1.CliqueIDLabel, names(labels)))
	}
	if len(addresses) > 0 {
		parts = append(parts, fmt.Sprintf("%d nodes are withheld: their daemon pod's address is another member's (check those nodes' kubelets): %s",
			len(addresses), names(addresses)))
	}
	c.Status, c.Message = metav1.ConditionTrue, strings.Join(parts, "; ")
	switch {
	case len(labels) > 0 && len(addresses) > 0:
		c.Reason = cdv1beta1.ReasonNodesWithheld
	case len(addresses) > 0:
		c.Reason = cdv1beta1.ReasonAddressInUse
	default:
		c.Reason = cdv1beta1.ReasonInvalidCliqueLabel
	}
	return c
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func summarise(res Result) []cdv1beta1.ComputeDomainCliqueSummary {
	var out []cdv1beta1.ComputeDomainCliqueSummary
	add := func(id string, entries []Entry) {
		s := cdv1beta1.ComputeDomainCliqueSummary{ID: id, Total: int32(len(entries))}
		for _, e := range entries {
			if e.Status == cdv1beta1.StatusReady {
				s.Ready++
			}
		}
		out = append(out, s)
	}
	for id, entries := range res.Cliques {
		add(id, entries)
	}
	if len(res.Fabricless) > 0 {
		add("", res.Fabricless)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func waitingNodes(w map[string][]string) []string {
	var out []string
	for _, nodes := range w {
		out = append(out, nodes...)
	}
	sort.Strings(out)
	return out
}

func names(nodes []string) string {
	if len(nodes) <= maxNamesInMessage {
		return strings.Join(nodes, ", ")
	}
	return fmt.Sprintf("%s (and %d more)", strings.Join(nodes[:maxNamesInMessage], ", "), len(nodes)-maxNamesInMessage)
}
