package status

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/testutil"
)

const (
	testUID      = "5f1c0c2e-uid"
	testDriverNS = "a-cdplane"
	cliqueA      = "6bd0a1c2-0000-4000-8000-000000000001.1"
	cliqueB      = "6bd0a1c2-0000-4000-8000-000000000001.2"
)

var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func testDomain() *cdv1beta1.ComputeDomain {
	cd := testutil.MakeComputeDomain("train").Namespace("team").UID(testUID).NumNodes(4).
		Label(cdv1beta1.ControlPlaneLabel, "a").Obj()
	return cd
}

// daemonPod is a pod of the domain's daemon DaemonSet on node, Ready or not, labelled with
// clique (nil: not labelled yet).
func daemonPod(node string, ready bool, clique *string) *testutil.PodWrapper {
	w := testutil.MakePod("computedomain-daemon-"+node, testDriverNS).NodeName(node).
		Label(cdv1beta1.ComputeDomainLabel, testUID).Ready(ready).Created(testNow.Add(-time.Hour))
	if clique != nil {
		w.Label(cdv1beta1.CliqueIDLabel, *clique)
	}
	return w
}

func strp(s string) *string { return &s }

func entry(node, clique string, index int, status string) cdv1beta1.ComputeDomainDaemonInfo {
	return cdv1beta1.ComputeDomainDaemonInfo{NodeName: node, IPAddress: "10.0.0.1", CliqueID: clique, Index: index, Status: status}
}

func TestHeldBackNodes(t *testing.T) {
	blockedCond := metav1.Condition{
		Type: cdv1beta1.ConditionNodesBlocked, Status: metav1.ConditionTrue, Reason: cdv1beta1.ReasonHostIMEXInUse,
		Message: "IMEX cannot run on 1 nodes; their daemons do not retry: n1 (HostIMEXInUse); a host nvidia-imex service holds each node's IMEX session (NV_ERR_IN_USE): stop it",
	}
	waiting := &corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	cases := map[string]struct {
		entries     []cdv1beta1.ComputeDomainDaemonInfo
		pods        []*corev1.Pod
		labelled    []string
		claimed     []string
		claimsKnown bool
		conditions  []metav1.Condition
		messages    map[string]string
		maxNodes    int
		want        []string // node/Reason
		wantMsg     string   // in the first one's message
	}{
		"every node ready": {
			entries:  []cdv1beta1.ComputeDomainDaemonInfo{entry("n1", cliqueA, 0, "Ready")},
			pods:     []*corev1.Pod{daemonPod("n1", true, strp(cliqueA)).Obj()},
			labelled: []string{"n1"}, claimed: []string{"n1"}, claimsKnown: true,
			want: []string{},
		},
		"claim allocated and node labelled, no daemon pod": {
			labelled: []string{"n1"}, claimed: []string{"n1"}, claimsKnown: true,
			want:    []string{"n1/NoDaemonPod"},
			wantMsg: "no daemon pod of the domain runs there: look at DaemonSet a-cdplane/computedomain-daemon-" + testUID,
		},
		"claim allocated, node not labelled yet": {
			claimed: []string{"n1"}, claimsKnown: true,
			want:    []string{"n1/NoDaemonPod"},
			wantMsg: "does not carry the domain's label yet",
		},
		"an entry whose daemon pod is gone": {
			entries:  []cdv1beta1.ComputeDomainDaemonInfo{entry("n1", cliqueA, 2, "NotReady")},
			labelled: []string{"n1"},
			want:     []string{"n1/NoDaemonPod"},
		},
		"an entry only, neither labelled nor claimed": {
			entries: []cdv1beta1.ComputeDomainDaemonInfo{entry("n1", cliqueA, 2, "NotReady")},
			want:    []string{"n1/NoDaemonPod"},
			wantMsg: "the node has an entry (index 2) but no daemon pod",
		},
		"host IMEX in use, from the pod's label": {
			entries: []cdv1beta1.ComputeDomainDaemonInfo{entry("n1", cliqueA, 0, "NotReady")},
			pods:    []*corev1.Pod{daemonPod("n1", false, strp(cliqueA)).Label(cdv1beta1.IMEXBlockedLabel, "HostIMEXInUse").Obj()},
			want:    []string{"n1/HostIMEXInUse"},
			wantMsg: "systemctl disable --now nvidia-imex",
		},
		"fabric error on a Ready fabric-less node": {
			entries: []cdv1beta1.ComputeDomainDaemonInfo{entry("n1", "", -1, "Ready")},
			pods:    []*corev1.Pod{daemonPod("n1", true, strp("")).Label(cdv1beta1.IMEXBlockedLabel, "FabricError").Obj()},
			want:    []string{"n1/FabricError"},
			wantMsg: "NVLink fabric registration failed",
		},
		"a blocked reason this version does not know": {
			pods:    []*corev1.Pod{daemonPod("n1", false, strp(cliqueA)).Label(cdv1beta1.IMEXBlockedLabel, "SomethingNew").Obj()},
			want:    []string{"n1/IMEXBlocked"},
			wantMsg: "(SomethingNew)",
		},
		"blocked as the NodesBlocked condition says, the pod's label not seen": {
			entries:    []cdv1beta1.ComputeDomainDaemonInfo{entry("n1", cliqueA, 0, "NotReady")},
			pods:       []*corev1.Pod{daemonPod("n1", false, strp(cliqueA)).Obj()},
			conditions: []metav1.Condition{blockedCond},
			want:       []string{"n1/HostIMEXInUse"},
		},
		"an address another member holds": {
			// As the controller writes it: the withheld member keeps its index, without the address.
			entries:  []cdv1beta1.ComputeDomainDaemonInfo{entry("n1", cliqueA, 0, "Ready"), {NodeName: "n2", CliqueID: cliqueA, Index: 1, Status: "NotReady"}},
			pods:     []*corev1.Pod{daemonPod("n1", true, strp(cliqueA)).PodIP("10.0.0.1").Obj(), daemonPod("n2", true, strp(cliqueA)).PodIP("10.0.0.1").Obj()},
			labelled: []string{"n1", "n2"}, claimed: []string{"n1", "n2"}, claimsKnown: true,
			want:    []string{"n2/AddressInUse"},
			wantMsg: "has address 10.0.0.1, which member n1 holds",
		},
		"an invalid clique label": {
			pods:    []*corev1.Pod{daemonPod("n1", false, strp("Not_A_Clique")).Obj()},
			want:    []string{"n1/InvalidCliqueLabel"},
			wantMsg: `"Not_A_Clique"`,
		},
		"clique full": {
			entries: []cdv1beta1.ComputeDomainDaemonInfo{entry("n1", cliqueA, 0, "Ready"), entry("n2", cliqueA, 1, "Ready")},
			pods: []*corev1.Pod{
				daemonPod("n1", true, strp(cliqueA)).Obj(), daemonPod("n2", true, strp(cliqueA)).Obj(),
				daemonPod("n3", false, strp(cliqueA)).Obj(),
			},
			maxNodes: 2,
			want:     []string{"n3/CliqueFull"},
			wantMsg:  "already has 2 nodes",
		},
		"another clique is not full": {
			entries: []cdv1beta1.ComputeDomainDaemonInfo{entry("n1", cliqueA, 0, "Ready"), entry("n2", cliqueA, 1, "Ready")},
			pods: []*corev1.Pod{
				daemonPod("n1", true, strp(cliqueA)).Obj(), daemonPod("n2", true, strp(cliqueA)).Obj(),
				daemonPod("n3", false, strp(cliqueB)).Obj(),
			},
			maxNodes: 2,
			want:     []string{"n3/DaemonNotReady"},
		},
		"daemon not ready, with its last probe failure": {
			entries:  []cdv1beta1.ComputeDomainDaemonInfo{entry("n1", cliqueA, 0, "NotReady")},
			pods:     []*corev1.Pod{withContainerState(daemonPod("n1", false, strp(cliqueA)).Obj(), waiting)},
			messages: map[string]string{"computedomain-daemon-n1": "Unhealthy: Readiness probe failed: IMEX is not ready: recovering"},
			want:     []string{"n1/DaemonNotReady"},
			wantMsg:  "daemon pod a-cdplane/computedomain-daemon-n1 is not Ready: container main waiting (ContainerCreating); last: Unhealthy: Readiness probe failed: IMEX is not ready: recovering",
		},
		"labelled and running a daemon, but no claim": {
			pods:     []*corev1.Pod{daemonPod("n1", true, strp(cliqueA)).Obj()},
			labelled: []string{"n1"}, claimsKnown: true,
			want:    []string{"n1/NoChannelClaim"},
			wantMsg: "not a member",
		},
		"claims unknown: no rule relies on them": {
			pods:     []*corev1.Pod{daemonPod("n1", true, strp(cliqueA)).Obj()},
			labelled: []string{"n1"},
			want:     []string{"n1/NotJoined"},
		},
		"the daemon has not labelled its pod yet": {
			pods:    []*corev1.Pod{daemonPod("n1", true, nil).Obj()},
			claimed: []string{"n1"}, labelled: []string{"n1"}, claimsKnown: true,
			want:    []string{"n1/NotJoined"},
			wantMsg: "has not labelled itself with its clique",
		},
		"pod Ready and labelled, no entry yet": {
			pods:    []*corev1.Pod{daemonPod("n1", true, strp(cliqueA)).Obj()},
			claimed: []string{"n1"}, labelled: []string{"n1"}, claimsKnown: true,
			want:    []string{"n1/NotJoined"},
			wantMsg: "the controller has not added it",
		},
		"entry NotReady behind a Ready pod": {
			entries: []cdv1beta1.ComputeDomainDaemonInfo{entry("n1", cliqueA, 0, "NotReady")},
			pods:    []*corev1.Pod{daemonPod("n1", true, strp(cliqueA)).Obj()},
			want:    []string{"n1/EntryNotReady"},
		},
		"a terminating pod yields to its replacement": {
			entries: []cdv1beta1.ComputeDomainDaemonInfo{entry("n1", cliqueA, 0, "Ready")},
			pods: []*corev1.Pod{
				daemonPod("n1", false, strp(cliqueA)).Terminating(testNow).Created(testNow).Obj(),
				func() *corev1.Pod {
					p := daemonPod("n1", true, strp(cliqueA)).Obj()
					p.Name += "-new"
					return p
				}(),
			},
			want: []string{},
		},
		"several nodes, sorted": {
			entries: []cdv1beta1.ComputeDomainDaemonInfo{entry("n2", cliqueA, 1, "NotReady"), entry("n1", cliqueA, 0, "Ready")},
			pods:    []*corev1.Pod{daemonPod("n1", true, strp(cliqueA)).Obj()},
			claimed: []string{"n3"}, labelled: []string{"n3", "n1", "n2"}, claimsKnown: true,
			want: []string{"n2/NoDaemonPod", "n3/NoDaemonPod"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cd := testDomain()
			cd.Status.Conditions = tc.conditions
			in := DomainInput{
				Domain: cd, DriverNamespace: testDriverNS, LabelledNodes: tc.labelled, ClaimNodes: tc.claimed,
				ClaimsKnown: tc.claimsKnown, PodMessages: tc.messages, MaxNodesPerClique: tc.maxNodes, Now: testNow,
			}
			if in.MaxNodesPerClique == 0 {
				in.MaxNodesPerClique = cdv1beta1.DefaultMaxNodesPerIMEXDomain
			}
			for _, p := range tc.pods {
				in.DaemonPods = append(in.DaemonPods, *p)
			}
			entries := map[string]cdv1beta1.ComputeDomainDaemonInfo{}
			for _, e := range tc.entries {
				entries[e.NodeName] = e
			}
			got := HeldBackNodes(in, entries)
			short := []string{}
			for _, h := range got {
				short = append(short, h.Node+"/"+h.Reason)
			}
			if diff := cmp.Diff(tc.want, short); diff != "" {
				t.Fatalf("held back (-want +got):\n%s\n%+v", diff, got)
			}
			if tc.wantMsg != "" && !strings.Contains(got[0].Message, tc.wantMsg) {
				t.Errorf("message %q, want it to contain %q", got[0].Message, tc.wantMsg)
			}
		})
	}
}

func withContainerState(p *corev1.Pod, s *corev1.ContainerState) *corev1.Pod {
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: *s}}
	return p
}

func TestBuildDomain(t *testing.T) {
	statusNodes := []cdv1beta1.ComputeDomainNode{
		{Name: "n2", IPAddress: "10.0.0.2", CliqueID: cliqueA, Index: 1, Status: "NotReady"},
		{Name: "n1", IPAddress: "10.0.0.1", CliqueID: cliqueA, Index: 0, Status: "Ready"},
		{Name: "n9", IPAddress: "10.0.0.9", CliqueID: "", Index: -1, Status: "Ready"},
	}
	cases := map[string]struct {
		cliques        []cdv1beta1.ComputeDomainClique
		wantMembership string
		wantCliques    []Clique
	}{
		"gate off: membership in status.nodes": {
			wantMembership: MembershipStatusNodes,
			wantCliques: []Clique{
				{ID: cliqueA, Ready: 1, Total: 2, Nodes: []Node{
					{Name: "n1", IPAddress: "10.0.0.1", Index: 0, Status: "Ready"},
					{Name: "n2", IPAddress: "10.0.0.2", Index: 1, Status: "NotReady"},
				}},
				{ID: "", Ready: 1, Total: 1, Nodes: []Node{{Name: "n9", IPAddress: "10.0.0.9", Index: -1, Status: "Ready"}}},
			},
		},
		"gate on: cliques win over status.nodes, fabric-less nodes from status.nodes": {
			cliques: []cdv1beta1.ComputeDomainClique{
				*testutil.MakeClique(testUID+"."+cliqueA, testDriverNS).
					Daemon("n1", "10.0.0.1", cliqueA, 0, "Ready").Daemon("n2", "10.0.0.2", cliqueA, 1, "Ready").
					Daemon("n3", "10.0.0.3", cliqueA, 2, "NotReady").Obj(),
			},
			wantMembership: MembershipCliques,
			wantCliques: []Clique{
				{ID: cliqueA, Ready: 2, Total: 3, Nodes: []Node{
					{Name: "n1", IPAddress: "10.0.0.1", Index: 0, Status: "Ready"},
					{Name: "n2", IPAddress: "10.0.0.2", Index: 1, Status: "Ready"},
					{Name: "n3", IPAddress: "10.0.0.3", Index: 2, Status: "NotReady"},
				}},
				{ID: "", Ready: 1, Total: 1, Nodes: []Node{{Name: "n9", IPAddress: "10.0.0.9", Index: -1, Status: "Ready"}}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cd := testDomain()
			cd.Status = cdv1beta1.ComputeDomainStatus{
				Status: "NotReady", Nodes: statusNodes, ReadyNodes: 2, TotalNodes: 3,
				Conditions: []metav1.Condition{{Type: "Ready", Status: "False", Reason: "DaemonsNotReady", Message: "1 of 3 daemons are not ready, on nodes: n2",
					LastTransitionTime: metav1.NewTime(testNow.Add(-time.Minute))}},
			}
			got := BuildDomain(DomainInput{Domain: cd, DriverNamespace: testDriverNS, Cliques: tc.cliques, Now: testNow, MaxNodesPerClique: 18})
			want := Domain{
				ObservedAt: testNow, Namespace: "team", Name: "train", UID: testUID, ControlPlaneID: "a", DriverNamespace: testDriverNS,
				Status: "NotReady", NumNodes: 4, ReadyNodes: 2, TotalNodes: 3, Membership: tc.wantMembership, Cliques: tc.wantCliques,
				Conditions: []Condition{{Type: "Ready", Status: "False", Reason: "DaemonsNotReady", Message: "1 of 3 daemons are not ready, on nodes: n2",
					LastTransitionTime: testNow.Add(-time.Minute)}},
			}
			// Nothing but entries: each entry without a daemon pod holds the domain back.
			want.HeldBack = got.HeldBack
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("BuildDomain (-want +got):\n%s", diff)
			}
			for _, h := range got.HeldBack {
				if h.Reason != ReasonNoDaemonPod {
					t.Errorf("node %s held back for %s, want %s (no pods given)", h.Node, h.Reason, ReasonNoDaemonPod)
				}
			}
		})
	}
}

func TestBlockedFromCondition(t *testing.T) {
	cases := map[string]struct {
		cond *metav1.Condition
		want map[string]string
	}{
		"none":  {},
		"false": {cond: &metav1.Condition{Type: cdv1beta1.ConditionNodesBlocked, Status: "False", Message: "no daemon reports IMEX blocked"}},
		"mixed reasons, truncated list and advice after a semicolon": {
			cond: &metav1.Condition{Type: cdv1beta1.ConditionNodesBlocked, Status: "True", Reason: "IMEXBlocked",
				Message: "IMEX cannot run on 10 nodes; their daemons do not retry: gpu-1.rack-2 (HostIMEXInUse), gpu-2 (FabricError) (and 8 more); see (docs)"},
			want: map[string]string{"gpu-1.rack-2": "HostIMEXInUse", "gpu-2": "FabricError"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var conds []metav1.Condition
			if tc.cond != nil {
				conds = append(conds, *tc.cond)
			}
			if diff := cmp.Diff(tc.want, BlockedFromCondition(conds)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzBlockedFromCondition: any message parses without panicking, and every node it names
// appears in the message.
func FuzzBlockedFromCondition(f *testing.F) {
	for _, s := range []string{
		"IMEX cannot run on 1 nodes; their daemons do not retry: n1 (HostIMEXInUse)",
		"x: (", "x: a (b) (c) (and 3 more)", ": ((()))", "no colon",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		got := BlockedFromCondition([]metav1.Condition{{Type: cdv1beta1.ConditionNodesBlocked, Status: "True", Message: msg}})
		for node, reason := range got {
			if !strings.Contains(msg, node+" ("+reason+")") {
				t.Errorf("node %q (%q) not in message %q", node, reason, msg)
			}
		}
	})
}
