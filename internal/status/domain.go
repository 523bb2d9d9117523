package status

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/kubectl/pkg/util/podutils"

	cdv1beta1 "cdplane/api/v1beta1"
)

// Where Domain.Membership says the nodes were read from.
const (
	MembershipCliques     = "cliques"
	MembershipStatusNodes = "status.nodes"
)

// DomainInput is everything BuildDomain needs, as read from the cluster.
type DomainInput struct {
	Domain *cdv1beta1.ComputeDomain
	// DriverNamespace is the domain's plane's driver namespace.
	DriverNamespace string
	// Cliques are the domain's ComputeDomainClique objects (none with the gate off).
	Cliques []cdv1beta1.ComputeDomainClique
	// DaemonPods are the pods of the domain's daemon DaemonSet.
	DaemonPods []corev1.Pod
	// LabelledNodes carry the domain's node label (resource.nvidia.com/computeDomain=<uid>).
	LabelledNodes []string
	// ClaimNodes are the nodes on which a channel claim of the domain is allocated; ClaimsKnown
	// is false when the claims could not be read (then no rule relies on them).
	ClaimNodes  []string
	ClaimsKnown bool
	// PodMessages maps a daemon pod's name to the latest Warning event about it (a readiness
	// probe failure, as the kubelet reports it, or the daemon's own event).
	PodMessages map[string]string
	// MaxNodesPerClique is the plane's --max-nodes-per-imex-domain.
	MaxNodesPerClique int
	Now               time.Time
}

// BuildDomain draws the domain from what was read: its members by clique, and the nodes that
// hold it back with why.
func BuildDomain(in DomainInput) Domain {
	cd := in.Domain
	d := Domain{
		ObservedAt: in.Now.UTC(), Namespace: cd.Namespace, Name: cd.Name, UID: string(cd.UID),
		ControlPlaneID: cd.Labels[cdv1beta1.ControlPlaneLabel], DriverNamespace: in.DriverNamespace,
		Status: cd.Status.Status, NumNodes: cd.Spec.NumNodes, ReadyNodes: cd.Status.ReadyNodes, TotalNodes: cd.Status.TotalNodes,
		Membership: MembershipStatusNodes, Cliques: []Clique{}, HeldBack: []HeldBack{}, Conditions: []Condition{},
	}
	if len(in.Cliques) > 0 {
		d.Membership = MembershipCliques
	}
	entries := Entries(cd, in.Cliques)
	d.Cliques = groupCliques(entries)
	d.HeldBack = HeldBackNodes(in, entries)
	for _, c := range cd.Status.Conditions {
		d.Conditions = append(d.Conditions, Condition{
			Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message, LastTransitionTime: c.LastTransitionTime.UTC(),
		})
	}
	return d
}

// Entries returns the domain's membership entries by node: every clique's daemons, and the
// entries of status.nodes that no clique holds (all of them with the gate off; with it on, the
// nodes without a fabric, which are in no clique).
func Entries(cd *cdv1beta1.ComputeDomain, cliques []cdv1beta1.ComputeDomainClique) map[string]cdv1beta1.ComputeDomainDaemonInfo {
	out := map[string]cdv1beta1.ComputeDomainDaemonInfo{}
	for _, c := range cliques {
		for _, e := range c.Daemons {
			out[e.NodeName] = e
		}
	}
	for _, n := range cd.Status.Nodes {
		if _, ok := out[n.Name]; ok {
			continue
		}
		out[n.Name] = cdv1beta1.ComputeDomainDaemonInfo{NodeName: n.Name, IPAddress: n.IPAddress, CliqueID: n.CliqueID, Index: n.Index, Status: n.Status}
	}
	return out
}

// groupCliques groups entries by clique id: cliques by id, the fabric-less group ("") last,
// nodes by index then name.
func groupCliques(entries map[string]cdv1beta1.ComputeDomainDaemonInfo) []Clique {
	byID := map[string]*Clique{}
	for _, e := range entries {
		c := byID[e.CliqueID]
		if c == nil {
			c = &Clique{ID: e.CliqueID}
			byID[e.CliqueID] = c
		}
		c.Nodes = append(c.Nodes, Node{Name: e.NodeName, IPAddress: e.IPAddress, Index: e.Index, Status: e.Status})
		c.Total++
		if e.Status == cdv1beta1.StatusReady {
			c.Ready++
		}
	}
	out := make([]Clique, 0, len(byID))
	for _, c := range byID {
		slices.SortFunc(c.Nodes, func(a, b Node) int { return cmp.Or(cmp.Compare(a.Index, b.Index), strings.Compare(a.Name, b.Name)) })
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b Clique) int {
		if (a.ID == "") != (b.ID == "") {
			if a.ID == "" {
				return 1
			}
			return -1
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// HeldBackNodes lists, by node, each node that keeps the domain from being Ready or serves it
// degraded, with the first reason that applies (the Reason* constants, in their order).
func HeldBackNodes(in DomainInput, entries map[string]cdv1beta1.ComputeDomainDaemonInfo) []HeldBack {
	pods := pickPods(in.DaemonPods)
	labelled := sets.New(in.LabelledNodes...)
	claimed := sets.New(in.ClaimNodes...)
	blockedByCondition := BlockedFromCondition(in.Domain.Status.Conditions)
	perClique := map[string]int{}
	addressHolder := map[string]string{}
	for _, e := range entries {
		perClique[e.CliqueID]++
		if e.IPAddress != "" {
			addressHolder[e.IPAddress] = e.NodeName
		}
	}

	nodes := sets.New[string]()
	nodes.Insert(labelled.UnsortedList()...)
	nodes.Insert(claimed.UnsortedList()...)
	nodes.Insert(slices.Collect(maps.Keys(entries))...)
	nodes.Insert(slices.Collect(maps.Keys(pods))...)
	nodes.Insert(slices.Collect(maps.Keys(blockedByCondition))...)

	out := []HeldBack{}
	for _, node := range sets.List(nodes) {
		pod, hasPod := pods[node]
		entry, hasEntry := entries[node]
		f := nodeFacts{
			node: node, pod: pod, hasPod: hasPod, entry: entry, hasEntry: hasEntry,
			labelled: labelled.Has(node), claimed: claimed.Has(node), claimsKnown: in.ClaimsKnown,
			blocked: blockedByCondition[node], cliqueMembers: perClique, maxNodes: in.MaxNodesPerClique,
			driverNS: in.DriverNamespace, uid: string(in.Domain.UID),
		}
		if hasPod {
			if v := pod.Labels[cdv1beta1.IMEXBlockedLabel]; v != "" {
				f.blocked = v
			}
			f.podMessage = in.PodMessages[pod.Name]
			if h := addressHolder[pod.Status.PodIP]; pod.Status.PodIP != "" && h != "" && h != node {
				f.addressHeldBy = h
			}
		}
		if hb, ok := f.heldBack(); ok {
			out = append(out, hb)
		}
	}
	return out
}

// nodeFacts is what is known about one node of the domain.
type nodeFacts struct {
	node              string
	pod               corev1.Pod
	hasPod            bool
	podMessage        string
	entry             cdv1beta1.ComputeDomainDaemonInfo
	hasEntry          bool
	labelled, claimed bool
	claimsKnown       bool
	blocked           string
	addressHeldBy     string
	cliqueMembers     map[string]int
	maxNodes          int
	driverNS, uid     string
}

// heldBack applies the rules in order; ok is false for a node that holds nothing back.
func (f nodeFacts) heldBack() (HeldBack, bool) {
	hb := HeldBack{Node: f.node}
	cliqueLabel, cliqueLabelled := f.pod.Labels[cdv1beta1.CliqueIDLabel]
	switch {
	case f.blocked != "":
		hb.Reason, hb.Message = blockedReason(f.blocked)
	case f.hasPod && cliqueLabelled && cdv1beta1.ValidateCliqueID(cliqueLabel) != nil:
		hb.Reason = ReasonInvalidCliqueLabel
		hb.Message = fmt.Sprintf("daemon pod %s labels its clique %q, which is not a valid clique id: the node is withheld from the domain", f.podRef(), cliqueLabel)
	case f.addressHeldBy != "":
		hb.Reason = ReasonAddressInUse
		hb.Message = fmt.Sprintf("daemon pod %s has address %s, which member %s holds: the node is withheld from the domain (check its kubelet)",
			f.podRef(), f.pod.Status.PodIP, f.addressHeldBy)
	case !f.hasPod:
		hb.Reason, hb.Message = ReasonNoDaemonPod, f.noPodMessage()
	case cliqueLabelled && cliqueLabel != "" && !f.hasEntry && f.maxNodes > 0 && f.cliqueMembers[cliqueLabel] >= f.maxNodes:
		hb.Reason = ReasonCliqueFull
		hb.Message = fmt.Sprintf("clique %s already has %d nodes, the plane's most per IMEX domain (--max-nodes-per-imex-domain): no free IMEX index for this node", cliqueLabel, f.cliqueMembers[cliqueLabel])
	case !podutils.IsPodReady(&f.pod):
		hb.Reason, hb.Message = ReasonDaemonNotReady, f.notReadyMessage()
	case f.claimsKnown && f.labelled && !f.claimed && !f.hasEntry:
		hb.Reason = ReasonNoChannelClaim
		hb.Message = "the node carries the domain's label and runs its daemon, but no channel claim of the domain is allocated on it: it is not a member"
	case !f.hasEntry && !cliqueLabelled:
		hb.Reason = ReasonNotJoined
		hb.Message = fmt.Sprintf("daemon pod %s has not labelled itself with its clique yet (%s): the daemon is starting", f.podRef(), cdv1beta1.CliqueIDLabel)
	case !f.hasEntry:
		hb.Reason = ReasonNotJoined
		hb.Message = fmt.Sprintf("daemon pod %s is Ready but the node has no entry yet: the controller has not added it", f.podRef())
	case f.entry.Status != cdv1beta1.StatusReady:
		hb.Reason = ReasonEntryNotReady
		hb.Message = fmt.Sprintf("daemon pod %s is Ready but the node's entry is %s: the controller has not updated it yet", f.podRef(), orDash(f.entry.Status))
	default:
		return hb, false
	}
	return hb, true
}

func (f nodeFacts) podRef() string { return f.driverNS + "/" + f.pod.Name }

func (f nodeFacts) noPodMessage() string {
	ds := f.driverNS + "/" + cdv1beta1.DaemonSetName(f.uid)
	switch {
	case f.claimed && !f.labelled:
		return "a channel claim of the domain is allocated on the node, but the node does not carry the domain's label yet " +
			"(the kubelet plugin sets it when it prepares the claim: is the workload pod running there, and the plane's kubelet plugin?)"
	case f.labelled:
		what := "the node carries the domain's label"
		if f.claimed {
			what = "a channel claim of the domain is allocated on the node and it carries the domain's label"
		}
		return what + ", but no daemon pod of the domain runs there: look at DaemonSet " + ds + " and the node's taints and resources"
	default:
		return fmt.Sprintf("the node has an entry (index %d) but no daemon pod of the domain runs there: look at DaemonSet %s", f.entry.Index, ds)
	}
}

func (f nodeFacts) notReadyMessage() string {
	msg := fmt.Sprintf("daemon pod %s is not Ready", f.podRef())
	if f.pod.DeletionTimestamp != nil {
		msg += " (terminating)"
	}
	if s := containerState(&f.pod); s != "" {
		msg += ": " + s
	}
	if f.podMessage != "" {
		msg += "; last: " + f.podMessage
	}
	return msg
}

// blockedReason maps an IMEX-blocked value (pod label, or NodesBlocked's) to a reason and a
// message saying what to do.
func blockedReason(v string) (string, string) {
	switch v {
	case cdv1beta1.IMEXBlockedHostIMEXInUse:
		return ReasonHostIMEXInUse, "IMEX cannot run: a host nvidia-imex service holds the node's IMEX session (NV_ERR_IN_USE); " +
			"stop and disable it (systemctl disable --now nvidia-imex), then delete the node's daemon pod, or run the plane with imex.mode=hostManaged"
	case cdv1beta1.IMEXBlockedFabricError:
		return ReasonFabricError, "the node's NVLink fabric registration failed: it serves without NVLink fabric (no IMEX); " +
			"see the FabricFailed events of its kubelet plugin"
	default:
		return ReasonBlocked, fmt.Sprintf("the daemon reports that IMEX cannot run on the node (%s) and does not retry", v)
	}
}

// blockedItem matches "node (Reason)" in a NodesBlocked message.
var blockedItem = regexp.MustCompile(`([^\s,()]+) \(([^()]+)\)`)

// BlockedFromCondition reads the nodes a True NodesBlocked condition names, with their reasons,
// from its message ("...: node-a (HostIMEXInUse), node-b (FabricError)"; at most 8 are named).
func BlockedFromCondition(conds []metav1.Condition) map[string]string {
	c := meta.FindStatusCondition(conds, cdv1beta1.ConditionNodesBlocked)
	if c == nil || c.Status != metav1.ConditionTrue {
		return nil
	}
	_, list, ok := strings.Cut(c.Message, ": ")
	if !ok {
		return nil
	}
	list, _, _ = strings.Cut(list, "; ")
	out := map[string]string{}
	for _, m := range blockedItem.FindAllStringSubmatch(list, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// pickPods keeps one daemon pod per node: one not being deleted before one that is, then the
// newest.
func pickPods(pods []corev1.Pod) map[string]corev1.Pod {
	out := map[string]corev1.Pod{}
	for _, p := range pods {
		node := p.Spec.NodeName
		if node == "" {
			continue
		}
		cur, ok := out[node]
		if !ok || better(&p, &cur) {
			out[node] = p
		}
	}
	return out
}

func better(a, b *corev1.Pod) bool {
	if (a.DeletionTimestamp == nil) != (b.DeletionTimestamp == nil) {
		return a.DeletionTimestamp == nil
	}
	return a.CreationTimestamp.After(b.CreationTimestamp.Time)
}

// containerState describes the first container that is not ready: waiting (with reason and
// message), terminated, or running but unready; or the pod's phase when no container reports.
func containerState(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Ready {
			continue
		}
		switch {
		case cs.State.Waiting != nil:
			s := fmt.Sprintf("container %s waiting (%s)", cs.Name, cs.State.Waiting.Reason)
			if m := cs.State.Waiting.Message; m != "" {
				s += ": " + m
			}
			return s
		case cs.State.Terminated != nil:
			return fmt.Sprintf("container %s terminated (%s, exit code %d)", cs.Name, cs.State.Terminated.Reason, cs.State.Terminated.ExitCode)
		case cs.State.Running != nil:
			return fmt.Sprintf("container %s running, readiness probe failing (restarts: %d)", cs.Name, cs.RestartCount)
		}
	}
	if p.Status.Phase != "" && p.Status.Phase != corev1.PodRunning {
		return "pod " + string(p.Status.Phase)
	}
	return ""
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
