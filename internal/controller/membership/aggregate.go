package membership

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdv1beta1 "cdplane/api/v1beta1"
)

// maxNamesInMessage bounds how many node names a condition message lists.
const maxNamesInMessage = 8

// Aggregate computes a ComputeDomain's membership status from the result of Compute: nodes
// (omitted above the limit), the per-clique summary, counts, status and the Ready and
// NodesInStatus conditions. Conditions other than those two are carried over from prev.
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

	nodesCond := metav1.Condition{
		Type: cdv1beta1.ConditionNodesInStatus, Status: metav1.ConditionTrue, Reason: cdv1beta1.ReasonNodesListed,
		Message: "status.nodes lists every node of the domain", ObservedGeneration: generation,
	}
	if len(all) > cdv1beta1.MaxStatusNodes {
		nodesCond.Status = metav1.ConditionFalse
		nodesCond.Reason = cdv1beta1.ReasonTooManyNodes
		nodesCond.Message = fmt.Sprintf("the domain has %d nodes, more than the %d status.nodes can hold; per-node data is in its ComputeDomainCliques only",
			len(all), cdv1beta1.MaxStatusNodes)
	} else {
		for _, e := range all {
			st.Nodes = append(st.Nodes, cdv1beta1.ComputeDomainNode{
				Name: e.NodeName, IPAddress: e.IPAddress, CliqueID: e.CliqueID, Index: e.Index, Status: e.Status,
			})
		}
	}

	ready := metav1.Condition{Type: cdv1beta1.ConditionReady, ObservedGeneration: generation}
	waiting := waitingNodes(res.Waiting)
	switch {
	case len(waiting) > 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, cdv1beta1.ReasonCliqueFull
		ready.Message = "no free IMEX index in the clique (raise --max-nodes-per-imex-domain or place fewer nodes per clique) for nodes: " + names(waiting)
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
	return st
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
