package membership

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	cdv1beta1 "cdplane/api/v1beta1"
)

const c1, c2 = "uuid-a.1", "uuid-b.1"

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func pod(node, ip, clique string, ready bool) Pod {
	return Pod{NodeName: node, IP: ip, CliqueID: clique, Labelled: true, Ready: ready, Created: t0, Owned: true}
}

func entry(node, ip, clique string, index int, ready bool) Entry {
	return Entry{NodeName: node, IPAddress: ip, CliqueID: clique, Index: index, Status: status(ready)}
}

func TestCompute(t *testing.T) {
	cases := map[string]struct {
		in   Input
		want Result
	}{
		"new nodes get the lowest free indexes in node-name order": {
			in: Input{
				Pods:          []Pod{pod("n3", "127.0.0.3", c1, false), pod("n1", "127.0.0.1", c1, true), pod("n2", "127.0.0.2", c1, true)},
				LabelledNodes: sets.New("n1", "n2", "n3"), AllocatedNodes: sets.New("n1", "n2", "n3"),
				MaxNodes: 18,
			},
			want: Result{Cliques: map[string][]Entry{c1: {
				entry("n1", "127.0.0.1", c1, 0, true), entry("n2", "127.0.0.2", c1, 1, true), entry("n3", "127.0.0.3", c1, 2, false),
			}}},
		},
		"existing indexes are kept and holes are filled first": {
			in: Input{
				Existing:      []Entry{entry("n1", "127.0.0.1", c1, 0, true), entry("n3", "127.0.0.3", c1, 2, true)},
				Pods:          []Pod{pod("n1", "127.0.0.1", c1, true), pod("n3", "127.0.0.3", c1, true), pod("n4", "127.0.0.4", c1, false)},
				LabelledNodes: sets.New("n1", "n3", "n4"), AllocatedNodes: sets.New("n1", "n3", "n4"),
				MaxNodes: 18,
			},
			want: Result{Cliques: map[string][]Entry{c1: {
				entry("n1", "127.0.0.1", c1, 0, true), entry("n3", "127.0.0.3", c1, 2, true), entry("n4", "127.0.0.4", c1, 1, false),
			}}},
		},
		"a labelled node whose pod is gone keeps its entry and index, not ready, without the old address": {
			in: Input{
				Existing:      []Entry{entry("n1", "127.0.0.1", c1, 5, true)},
				LabelledNodes: sets.New("n1"), AllocatedNodes: sets.New("n1"),
				MaxNodes: 18,
			},
			want: Result{Cliques: map[string][]Entry{c1: {entry("n1", "", c1, 5, false)}}},
		},
		"a replacement pod without an address yet: the old address is not kept": {
			in: Input{
				Existing:      []Entry{entry("n1", "127.0.0.1", c1, 5, true)},
				Pods:          []Pod{{NodeName: "n1", Created: t0, Owned: true}},
				LabelledNodes: sets.New("n1"), AllocatedNodes: sets.New("n1"),
				MaxNodes: 18,
			},
			want: Result{Cliques: map[string][]Entry{c1: {entry("n1", "", c1, 5, false)}}},
		},
		"a replacement pod not yet labelled keeps the index and takes the new IP": {
			in: Input{
				Existing:      []Entry{entry("n1", "127.0.0.1", c1, 5, true)},
				Pods:          []Pod{{NodeName: "n1", IP: "127.0.0.9", Created: t0, Owned: true}},
				LabelledNodes: sets.New("n1"), AllocatedNodes: sets.New("n1"),
				MaxNodes: 18,
			},
			want: Result{Cliques: map[string][]Entry{c1: {entry("n1", "127.0.0.9", c1, 5, false)}}},
		},
		"an IP change keeps the index": {
			in: Input{
				Existing:      []Entry{entry("n1", "127.0.0.1", c1, 7, true)},
				Pods:          []Pod{pod("n1", "127.0.0.8", c1, true)},
				LabelledNodes: sets.New("n1"), AllocatedNodes: sets.New("n1"),
				MaxNodes: 18,
			},
			want: Result{Cliques: map[string][]Entry{c1: {entry("n1", "127.0.0.8", c1, 7, true)}}},
		},
		"a node that lost the label loses its entry even while its pod lingers": {
			in: Input{
				Existing:      []Entry{entry("n1", "127.0.0.1", c1, 0, true), entry("n2", "127.0.0.2", c1, 1, true)},
				Pods:          []Pod{pod("n1", "127.0.0.1", c1, true), pod("n2", "127.0.0.2", c1, true)},
				LabelledNodes: sets.New("n1"), AllocatedNodes: sets.New("n1"),
				MaxNodes: 18,
			},
			want: Result{Cliques: map[string][]Entry{c1: {entry("n1", "127.0.0.1", c1, 0, true)}}},
		},
		"a labelled node without pod or entry is not a member yet": {
			in:   Input{LabelledNodes: sets.New("n1"), AllocatedNodes: sets.New("n1"), MaxNodes: 18},
			want: Result{Cliques: map[string][]Entry{}},
		},
		"a pod its daemon has not labelled yet is not a member yet": {
			in:   Input{Pods: []Pod{{NodeName: "n1", IP: "127.0.0.1", Owned: true}}, LabelledNodes: sets.New("n1"), AllocatedNodes: sets.New("n1"), MaxNodes: 18},
			want: Result{Cliques: map[string][]Entry{}},
		},
		"fabric-less pods are listed apart with index -1": {
			in: Input{
				Pods:          []Pod{pod("n1", "127.0.0.1", "", true), pod("n2", "127.0.0.2", c1, true)},
				LabelledNodes: sets.New("n1", "n2"), AllocatedNodes: sets.New("n1", "n2"),
				MaxNodes: 18,
			},
			want: Result{
				Cliques:    map[string][]Entry{c1: {entry("n2", "127.0.0.2", c1, 0, true)}},
				Fabricless: []Entry{entry("n1", "127.0.0.1", "", -1, true)},
			},
		},
		"indexes are per clique": {
			in: Input{
				Pods:          []Pod{pod("a1", "127.0.0.1", c1, true), pod("b1", "127.0.0.2", c2, true)},
				LabelledNodes: sets.New("a1", "b1"), AllocatedNodes: sets.New("a1", "b1"),
				MaxNodes: 18,
			},
			want: Result{Cliques: map[string][]Entry{
				c1: {entry("a1", "127.0.0.1", c1, 0, true)},
				c2: {entry("b1", "127.0.0.2", c2, 0, true)},
			}},
		},
		"a node that moved clique gets an index in the new one": {
			in: Input{
				Existing:      []Entry{entry("n1", "127.0.0.1", c1, 3, true), entry("n2", "127.0.0.2", c2, 0, true)},
				Pods:          []Pod{pod("n1", "127.0.0.1", c2, true), pod("n2", "127.0.0.2", c2, true)},
				LabelledNodes: sets.New("n1", "n2"), AllocatedNodes: sets.New("n1", "n2"),
				MaxNodes: 18,
			},
			want: Result{Cliques: map[string][]Entry{c2: {entry("n1", "127.0.0.1", c2, 1, true), entry("n2", "127.0.0.2", c2, 0, true)}}},
		},
		"a full clique leaves the rest waiting": {
			in: Input{
				Pods:          []Pod{pod("n1", "127.0.0.1", c1, true), pod("n2", "127.0.0.2", c1, true), pod("n3", "127.0.0.3", c1, true)},
				LabelledNodes: sets.New("n1", "n2", "n3"), AllocatedNodes: sets.New("n1", "n2", "n3"),
				MaxNodes: 2,
			},
			want: Result{
				Cliques: map[string][]Entry{c1: {entry("n1", "127.0.0.1", c1, 0, true), entry("n2", "127.0.0.2", c1, 1, true)}},
				Waiting: map[string][]string{c1: {"n3"}},
			},
		},
		"a duplicated index is kept by the first node and reassigned for the second": {
			in: Input{
				Existing:      []Entry{entry("n1", "127.0.0.1", c1, 0, true), entry("n2", "127.0.0.2", c1, 0, true)},
				Pods:          []Pod{pod("n1", "127.0.0.1", c1, true), pod("n2", "127.0.0.2", c1, true)},
				LabelledNodes: sets.New("n1", "n2"), AllocatedNodes: sets.New("n1", "n2"),
				MaxNodes: 18,
			},
			want: Result{Cliques: map[string][]Entry{c1: {entry("n1", "127.0.0.1", c1, 0, true), entry("n2", "127.0.0.2", c1, 1, true)}}},
		},
		"a running pod wins over a terminating one on the same node": {
			in: Input{
				Existing: []Entry{entry("n1", "127.0.0.1", c1, 4, true)},
				Pods: []Pod{
					{NodeName: "n1", IP: "127.0.0.1", CliqueID: c1, Labelled: true, Ready: true, Terminating: true, Created: t0.Add(time.Hour), Owned: true},
					{NodeName: "n1", IP: "127.0.0.7", CliqueID: c1, Labelled: true, Ready: false, Created: t0, Owned: true},
				},
				LabelledNodes: sets.New("n1"), AllocatedNodes: sets.New("n1"),
				MaxNodes: 18,
			},
			want: Result{Cliques: map[string][]Entry{c1: {entry("n1", "127.0.0.7", c1, 4, false)}}},
		},
		"a labelled node without an allocated channel claim of the domain is not a member": {
			in: Input{
				Existing:       []Entry{entry("n1", "127.0.0.1", c1, 0, true)},
				Pods:           []Pod{pod("n1", "127.0.0.1", c1, true), pod("n2", "127.0.0.2", c1, true)},
				LabelledNodes:  sets.New("n1", "n2"),
				AllocatedNodes: sets.New("n2", "n3"),
				MaxNodes:       18,
			},
			want: Result{Cliques: map[string][]Entry{c1: {entry("n2", "127.0.0.2", c1, 0, true)}}},
		},
		"a pod the domain's DaemonSet does not own is not a daemon": {
			in: Input{
				Pods: []Pod{
					{NodeName: "n1", IP: "127.0.0.66", CliqueID: c2, Labelled: true, Ready: true, Created: t0.Add(time.Hour)},
					pod("n1", "127.0.0.1", c1, false),
					{NodeName: "n2", IP: "127.0.0.2", CliqueID: c1, Labelled: true, Ready: true, Created: t0},
				},
				LabelledNodes: sets.New("n1", "n2"), AllocatedNodes: sets.New("n1", "n2"),
				MaxNodes: 18,
			},
			want: Result{Cliques: map[string][]Entry{c1: {entry("n1", "127.0.0.1", c1, 0, false)}}},
		},
		"an invalid clique label withholds that node only": {
			in: Input{
				Pods: []Pod{
					pod("n1", "127.0.0.1", "Bad_Clique", true), pod("n2", "127.0.0.2", c1, true),
					pod("n3", "127.0.0.3", "uuid..1", true), pod("n4", "127.0.0.4", "", true),
				},
				LabelledNodes: sets.New("n1", "n2", "n3", "n4"), AllocatedNodes: sets.New("n1", "n2", "n3", "n4"),
				MaxNodes: 18,
			},
			want: Result{
				Cliques:    map[string][]Entry{c1: {entry("n2", "127.0.0.2", c1, 0, true)}},
				Fabricless: []Entry{entry("n4", "127.0.0.4", "", -1, true)},
				Withheld: []Withheld{{Node: "n1", Reason: cdv1beta1.ReasonInvalidCliqueLabel, Value: "Bad_Clique"},
					{Node: "n3", Reason: cdv1beta1.ReasonInvalidCliqueLabel, Value: "uuid..1"}},
			},
		},
		"a member whose label turns invalid keeps its entry and index, not ready": {
			in: Input{
				Existing:      []Entry{entry("n1", "127.0.0.1", c1, 3, true)},
				Pods:          []Pod{pod("n1", "127.0.0.1", "UPPER.1", true)},
				LabelledNodes: sets.New("n1"), AllocatedNodes: sets.New("n1"),
				MaxNodes: 18,
			},
			want: Result{
				Cliques:  map[string][]Entry{c1: {entry("n1", "127.0.0.1", c1, 3, false)}},
				Withheld: []Withheld{{Node: "n1", Reason: cdv1beta1.ReasonInvalidCliqueLabel, Value: "UPPER.1"}},
			},
		},
		"a member's address claimed by a joining node: the member keeps it, the newcomer is withheld": {
			in: Input{
				Existing:      []Entry{entry("n1", "127.0.0.1", c1, 0, true), entry("n2", "127.0.0.2", c1, 1, true)},
				Pods:          []Pod{pod("n1", "127.0.0.1", c1, true), pod("n2", "127.0.0.2", c1, true), pod("n3", "127.0.0.1", c1, true)},
				LabelledNodes: sets.New("n1", "n2", "n3"), AllocatedNodes: sets.New("n1", "n2", "n3"),
				MaxNodes: 18,
			},
			want: Result{
				Cliques:  map[string][]Entry{c1: {entry("n1", "127.0.0.1", c1, 0, true), entry("n2", "127.0.0.2", c1, 1, true)}},
				Withheld: []Withheld{{Node: "n3", Reason: cdv1beta1.ReasonAddressInUse, Value: "127.0.0.1", Holder: "n1"}},
			},
		},
		"a member's address claimed by another member: the earlier holder keeps it, the other keeps its index without it": {
			in: Input{
				Existing:      []Entry{entry("n1", "127.0.0.1", c1, 0, true), entry("n2", "127.0.0.2", c1, 1, true)},
				Pods:          []Pod{pod("n1", "127.0.0.1", c1, true), pod("n2", "127.0.0.1", c1, true)},
				LabelledNodes: sets.New("n1", "n2"), AllocatedNodes: sets.New("n1", "n2"),
				MaxNodes: 18,
			},
			want: Result{
				Cliques:  map[string][]Entry{c1: {entry("n1", "127.0.0.1", c1, 0, true), entry("n2", "", c1, 1, false)}},
				Withheld: []Withheld{{Node: "n2", Reason: cdv1beta1.ReasonAddressInUse, Value: "127.0.0.1", Holder: "n1"}},
			},
		},
		"two newcomers with one address: the older pod's node joins": {
			in: Input{
				Pods: []Pod{
					{NodeName: "n1", IP: "127.0.0.9", CliqueID: c1, Labelled: true, Ready: true, Owned: true, Created: time.Unix(200, 0)},
					{NodeName: "n2", IP: "127.0.0.9", CliqueID: c1, Labelled: true, Ready: true, Owned: true, Created: time.Unix(100, 0)},
				},
				LabelledNodes: sets.New("n1", "n2"), AllocatedNodes: sets.New("n1", "n2"),
				MaxNodes: 18,
			},
			want: Result{
				Cliques:  map[string][]Entry{c1: {entry("n2", "127.0.0.9", c1, 0, true)}},
				Withheld: []Withheld{{Node: "n1", Reason: cdv1beta1.ReasonAddressInUse, Value: "127.0.0.9", Holder: "n2"}},
			},
		},
		"a daemon that reports IMEX blocked: its node is listed, its entry kept, not ready": {
			in: Input{
				Existing: []Entry{entry("n1", "127.0.0.1", c1, 0, true)},
				Pods: []Pod{
					{NodeName: "n1", IP: "127.0.0.1", CliqueID: c1, Labelled: true, Owned: true, Blocked: cdv1beta1.IMEXBlockedHostIMEXInUse},
					pod("n2", "127.0.0.2", c1, true),
				},
				LabelledNodes: sets.New("n1", "n2"), AllocatedNodes: sets.New("n1", "n2"),
				MaxNodes: 18,
			},
			want: Result{
				Cliques: map[string][]Entry{c1: {entry("n1", "127.0.0.1", c1, 0, false), entry("n2", "127.0.0.2", c1, 1, true)}},
				Blocked: []Blocked{{Node: "n1", Reason: cdv1beta1.IMEXBlockedHostIMEXInUse}},
			},
		},
		"an existing entry with an invalid clique id is not kept": {
			in: Input{
				Existing:      []Entry{entry("n1", "127.0.0.1", "Bad_Clique", 3, true)},
				LabelledNodes: sets.New("n1"), AllocatedNodes: sets.New("n1"),
				MaxNodes: 18,
			},
			want: Result{Cliques: map[string][]Entry{}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Compute(tc.in)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Compute (-want +got):\n%s", diff)
			}
		})
	}
}

func TestComputeEighteenAtOnceGetDistinctIndexes(t *testing.T) {
	in := Input{LabelledNodes: sets.New[string](), AllocatedNodes: sets.New[string](), MaxNodes: 18}
	for i := range 18 {
		node := fmt.Sprintf("node-%02d", 17-i)
		in.Pods = append(in.Pods, pod(node, fmt.Sprintf("127.0.1.%d", i+1), c1, false))
		in.LabelledNodes.Insert(node)
		in.AllocatedNodes.Insert(node)
	}
	got := Compute(in).Cliques[c1]
	seen := sets.New[int]()
	for _, e := range got {
		seen.Insert(e.Index)
	}
	if len(got) != 18 || seen.Len() != 18 || !seen.Has(0) || !seen.Has(17) {
		t.Fatalf("want 18 entries with indexes 0..17, got %+v", got)
	}
	// Feeding the result back in changes nothing: indexes are stable.
	again := Compute(Input{Existing: got, Pods: in.Pods, LabelledNodes: in.LabelledNodes, AllocatedNodes: in.AllocatedNodes, MaxNodes: 18}).Cliques[c1]
	if diff := cmp.Diff(got, again); diff != "" {
		t.Errorf("recomputing moved entries (-first +second):\n%s", diff)
	}
}

func TestAggregate(t *testing.T) {
	cases := map[string]struct {
		res        Result
		numNodes   int
		wantStatus string
		wantReason string
		wantReady  int32
		wantTotal  int32
	}{
		"all ready": {
			res:        Result{Cliques: map[string][]Entry{c1: {entry("n1", "ip", c1, 0, true), entry("n2", "ip", c1, 1, true)}}},
			numNodes:   2,
			wantStatus: "Ready", wantReason: cdv1beta1.ReasonAllNodesReady, wantReady: 2, wantTotal: 2,
		},
		"fewer than numNodes": {
			res:        Result{Cliques: map[string][]Entry{c1: {entry("n1", "ip", c1, 0, true)}}},
			numNodes:   2,
			wantStatus: "NotReady", wantReason: cdv1beta1.ReasonWaitingForNodes, wantReady: 1, wantTotal: 1,
		},
		"one not ready": {
			res:        Result{Cliques: map[string][]Entry{c1: {entry("n1", "ip", c1, 0, true)}}, Fabricless: []Entry{entry("f1", "ip", "", -1, false)}},
			numNodes:   0,
			wantStatus: "NotReady", wantReason: cdv1beta1.ReasonDaemonsNotReady, wantReady: 1, wantTotal: 2,
		},
		"clique full": {
			res:        Result{Cliques: map[string][]Entry{c1: {entry("n1", "ip", c1, 0, true)}}, Waiting: map[string][]string{c1: {"n2"}}},
			wantStatus: "NotReady", wantReason: cdv1beta1.ReasonCliqueFull, wantReady: 1, wantTotal: 1,
		},
		"numNodes 0 and no nodes yet": {
			res:        Result{},
			wantStatus: "Ready", wantReason: cdv1beta1.ReasonAllNodesReady,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			st := Aggregate(tc.res, tc.numNodes, 3, nil)
			c := findCondition(st.Conditions, cdv1beta1.ConditionReady)
			if st.Status != tc.wantStatus || c.Reason != tc.wantReason || c.ObservedGeneration != 3 ||
				st.ReadyNodes != tc.wantReady || st.TotalNodes != tc.wantTotal {
				t.Errorf("got status=%s reason=%s gen=%d ready=%d total=%d; want %s %s 3 %d %d",
					st.Status, c.Reason, c.ObservedGeneration, st.ReadyNodes, st.TotalNodes,
					tc.wantStatus, tc.wantReason, tc.wantReady, tc.wantTotal)
			}
			if len(st.Nodes) != int(tc.wantTotal) {
				t.Errorf("status.nodes has %d entries, want %d", len(st.Nodes), tc.wantTotal)
			}
		})
	}
}

func TestAggregateOmitsNodesAboveTheLimit(t *testing.T) {
	res := Result{Cliques: map[string][]Entry{}}
	for i := range cdv1beta1.MaxStatusNodes + 1 {
		id := fmt.Sprintf("uuid.%d", i/18)
		res.Cliques[id] = append(res.Cliques[id], entry(fmt.Sprintf("n%05d", i), "ip", id, i%18, true))
	}
	st := Aggregate(res, 0, 1, nil)
	if st.Nodes != nil {
		t.Errorf("status.nodes has %d entries, want it omitted", len(st.Nodes))
	}
	c := findCondition(st.Conditions, cdv1beta1.ConditionNodesInStatus)
	if c.Status != metav1.ConditionFalse || c.Reason != cdv1beta1.ReasonTooManyNodes {
		t.Errorf("NodesInStatus = %s/%s, want False/%s", c.Status, c.Reason, cdv1beta1.ReasonTooManyNodes)
	}
	if st.TotalNodes != cdv1beta1.MaxStatusNodes+1 || len(st.Cliques) != (cdv1beta1.MaxStatusNodes/18)+1 || st.Status != "Ready" {
		t.Errorf("summary: total=%d cliques=%d status=%s", st.TotalNodes, len(st.Cliques), st.Status)
	}
}

func findCondition(conds []metav1.Condition, t string) metav1.Condition {
	for _, c := range conds {
		if c.Type == t {
			return c
		}
	}
	return metav1.Condition{}
}

// longName is a node name of the most characters a node name may have (253).
func longName(i int) string {
	return fmt.Sprintf("%s-%06d", strings.Repeat("n", 246), i)
}

const longIP = "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255" // 45 characters, the most

// longIPOf is a distinct address of longIP's length for each i below 1,000,000.
func longIPOf(i int) string {
	return fmt.Sprintf("ffff:ffff:ffff:ffff:ffff:ffff:255.255.%03d.%03d", i/1000, i%1000)
}

// With cliques off, status.nodes is the only place membership lives: every member is kept, new
// nodes join only while the entries fit, the rest wait.
func TestComputeStatusOnlyAdmitsWhatFits(t *testing.T) {
	in := Input{LabelledNodes: sets.New[string](), AllocatedNodes: sets.New[string](), MaxNodes: 18, StatusOnly: true}
	const members = 1000
	for i := range 3000 {
		node := longName(i)
		clique := fmt.Sprintf("7f9c1b2e-0d7a-4c1f-9a55-3b6f2f0e8c11.%d", i%200)
		in.LabelledNodes.Insert(node)
		in.AllocatedNodes.Insert(node)
		ip := longIPOf(i) // each its own: a shared address withholds all but one
		in.Pods = append(in.Pods, pod(node, ip, clique, true))
		if i >= 3000-members { // the members sort last: they are kept before any newcomer
			in.Existing = append(in.Existing, entry(node, ip, clique, (i/200)%18, true))
		}
	}
	res := Compute(in)
	all := res.All()
	b := newBudget()
	for _, e := range all {
		b.add(e)
	}
	if !b.within() {
		t.Errorf("%d entries of %d estimated bytes admitted, more than status.nodes holds", len(all), b.bytes)
	}
	if len(all)+len(res.Overflow) != 3000 || len(res.Overflow) == 0 {
		t.Fatalf("%d admitted and %d waiting, want 3000 in all and some waiting", len(all), len(res.Overflow))
	}
	admitted := sets.New[string]()
	for _, e := range all {
		admitted.Insert(e.NodeName)
	}
	for _, e := range in.Existing {
		if !admitted.Has(e.NodeName) {
			t.Fatalf("member %s was dropped", e.NodeName)
		}
	}
	if !sort.StringsAreSorted(res.Overflow) || res.Overflow[len(res.Overflow)-1] != longName(3000-members-1) {
		t.Errorf("waiting nodes are not the last newcomers in name order: %v", res.Overflow[len(res.Overflow)-3:])
	}
	st := Aggregate(res, 0, 1, nil)
	if len(st.Nodes) != len(all) {
		t.Errorf("status.nodes lists %d entries, want every one of the %d members", len(st.Nodes), len(all))
	}
	nodesCond, ready := findCondition(st.Conditions, cdv1beta1.ConditionNodesInStatus), findCondition(st.Conditions, cdv1beta1.ConditionReady)
	if nodesCond.Reason != cdv1beta1.ReasonStatusFull || ready.Reason != cdv1beta1.ReasonStatusFull || st.Status != cdv1beta1.StatusNotReady {
		t.Errorf("NodesInStatus %s, Ready %s, status %s; want StatusFull, StatusFull, NotReady", nodesCond.Reason, ready.Reason, st.Status)
	}
}

// Above the byte bound (far below 4,096 entries with the longest names and addresses), cliques
// hold per-node data and status.nodes lists only the fabric-less nodes, so that they become Ready.
func TestAggregateBoundsStatusByBytes(t *testing.T) {
	res := Result{Cliques: map[string][]Entry{}}
	const n = 2000
	for i := range n {
		id := fmt.Sprintf("7f9c1b2e-0d7a-4c1f-9a55-3b6f2f0e8c11.%d", i/18)
		res.Cliques[id] = append(res.Cliques[id], entry(longName(i), longIP, id, i%18, true))
	}
	res.Fabricless = []Entry{entry(longName(n), longIP, "", -1, true), entry(longName(n+1), longIP, "", -1, true)}
	st := Aggregate(res, 0, 1, nil)
	c := findCondition(st.Conditions, cdv1beta1.ConditionNodesInStatus)
	if c.Status != metav1.ConditionFalse || c.Reason != cdv1beta1.ReasonTooManyNodes {
		t.Errorf("NodesInStatus = %s/%s, want False/%s", c.Status, c.Reason, cdv1beta1.ReasonTooManyNodes)
	}
	var listed []string
	for _, e := range st.Nodes {
		listed = append(listed, e.Name)
	}
	if diff := cmp.Diff([]string{longName(n), longName(n + 1)}, listed); diff != "" {
		t.Errorf("status.nodes (-want +got), want the fabric-less nodes only:\n%s", diff)
	}
	if st.Status != cdv1beta1.StatusReady || st.TotalNodes != n+2 {
		t.Errorf("status %s with %d nodes, want Ready with %d", st.Status, st.TotalNodes, n+2)
	}
}

func TestEntryBytesWorstCase(t *testing.T) {
	e := entry(longName(0), longIP, "7f9c1b2e-0d7a-4c1f-9a55-3b6f2f0e8c11.4294967295", 17, false)
	fit := (cdv1beta1.MaxStatusBytes - conditionsAllowance) / (EntryBytes(e) + SummaryBytes(e.CliqueID)/18)
	t.Logf("worst-case entry: %d estimated bytes; about %d such entries fit status.nodes", EntryBytes(e), fit)
	if fit < 1000 || fit >= cdv1beta1.MaxStatusNodes {
		t.Errorf("%d worst-case entries fit: the byte bound is not the one that binds, or is absurdly low", fit)
	}
}

func TestWithheldCondition(t *testing.T) {
	var w []Withheld
	for i := range 10 {
		w = append(w, Withheld{Node: fmt.Sprintf("n%d", i), Value: "Bad_" + strings.Repeat("x", 80)})
	}
	st := Aggregate(Result{Withheld: w}, 0, 4, nil)
	c := findCondition(st.Conditions, cdv1beta1.ConditionNodesWithheld)
	if c.Status != metav1.ConditionTrue || c.Reason != cdv1beta1.ReasonInvalidCliqueLabel || c.ObservedGeneration != 4 ||
		!strings.Contains(c.Message, `n0 ("Bad_x`) || !strings.Contains(c.Message, "(and 2 more)") || len(c.Message) > 2048 {
		t.Errorf("NodesWithheld = %+v", c)
	}
	st = Aggregate(Result{}, 0, 4, st.Conditions)
	if c := findCondition(st.Conditions, cdv1beta1.ConditionNodesWithheld); c.Status != metav1.ConditionFalse || c.Reason != cdv1beta1.ReasonNoneWithheld {
		t.Errorf("once none is withheld: %+v", c)
	}
	address := Withheld{Node: "n7", Reason: cdv1beta1.ReasonAddressInUse, Value: "127.0.0.1", Holder: "n1"}
	st = Aggregate(Result{Withheld: []Withheld{address}}, 0, 5, nil)
	if c := findCondition(st.Conditions, cdv1beta1.ConditionNodesWithheld); c.Status != metav1.ConditionTrue || c.Reason != cdv1beta1.ReasonAddressInUse ||
		!strings.Contains(c.Message, "n7 (127.0.0.1, held by n1)") {
		t.Errorf("an address in use: %+v", c)
	}
	st = Aggregate(Result{Withheld: []Withheld{w[0], address}}, 0, 5, nil)
	if c := findCondition(st.Conditions, cdv1beta1.ConditionNodesWithheld); c.Reason != cdv1beta1.ReasonNodesWithheld ||
		!strings.Contains(c.Message, "n7 (127.0.0.1, held by n1)") || !strings.Contains(c.Message, `n0 ("Bad_x`) {
		t.Errorf("both reasons: %+v", c)
	}
}

func TestBlockedCondition(t *testing.T) {
	inUse := []Blocked{{Node: "n1", Reason: cdv1beta1.IMEXBlockedHostIMEXInUse}, {Node: "n2", Reason: cdv1beta1.IMEXBlockedHostIMEXInUse}}
	st := Aggregate(Result{Blocked: inUse}, 0, 3, nil)
	c := findCondition(st.Conditions, cdv1beta1.ConditionNodesBlocked)
	if c.Status != metav1.ConditionTrue || c.Reason != cdv1beta1.ReasonHostIMEXInUse || c.ObservedGeneration != 3 ||
		!strings.Contains(c.Message, "n1 (HostIMEXInUse), n2 (HostIMEXInUse)") || !strings.Contains(c.Message, "systemctl disable --now nvidia-imex") {
		t.Errorf("NodesBlocked = %+v", c)
	}
	st = Aggregate(Result{Blocked: append(inUse, Blocked{Node: "n3", Reason: "SomethingNew"})}, 0, 3, st.Conditions)
	if c := findCondition(st.Conditions, cdv1beta1.ConditionNodesBlocked); c.Status != metav1.ConditionTrue || c.Reason != cdv1beta1.ReasonIMEXBlocked ||
		!strings.Contains(c.Message, "n3 (SomethingNew)") {
		t.Errorf("with an unknown reason: %+v", c)
	}
	st = Aggregate(Result{Blocked: []Blocked{{Node: "n4", Reason: cdv1beta1.IMEXBlockedFabricError}}}, 0, 3, st.Conditions)
	if c := findCondition(st.Conditions, cdv1beta1.ConditionNodesBlocked); c.Status != metav1.ConditionTrue || c.Reason != cdv1beta1.ReasonFabricError ||
		!strings.Contains(c.Message, "n4 (FabricError)") || !strings.Contains(c.Message, "serve as nodes without NVLink fabric") {
		t.Errorf("a failed fabric: %+v", c)
	}
	st = Aggregate(Result{}, 0, 3, st.Conditions)
	if c := findCondition(st.Conditions, cdv1beta1.ConditionNodesBlocked); c.Status != metav1.ConditionFalse || c.Reason != cdv1beta1.ReasonNoneBlocked {
		t.Errorf("once none is blocked: %+v", c)
	}
}

// BenchmarkCompute: one pass's membership over a 20,016-node domain in 1,112 cliques of 18,
// every node placed and Ready, as at the end of a burst (the pass the controller repeats most).
func BenchmarkCompute(b *testing.B) {
	const nodes, clique = 20016, 18
	in := Input{MaxNodes: clique, LabelledNodes: sets.New[string](), AllocatedNodes: sets.New[string]()}
	for i := range nodes {
		node, id := fmt.Sprintf("node-%05d", i), fmt.Sprintf("%08x-0000-0000-0000-%012x.%d", i/clique, i/clique, i/clique)
		in.LabelledNodes.Insert(node)
		in.AllocatedNodes.Insert(node)
		in.Pods = append(in.Pods, Pod{NodeName: node, IP: fmt.Sprintf("127.0.%d.%d", i/250, i%250+1), CliqueID: id,
			Labelled: true, Ready: true, Owned: true})
		in.Existing = append(in.Existing, Entry{NodeName: node, IPAddress: in.Pods[i].IP, CliqueID: id, Index: i % clique, Status: cdv1beta1.StatusReady})
	}
	for b.Loop() {
		if res := Compute(in); len(res.Cliques) != (nodes+clique-1)/clique {
			b.Fatalf("%d cliques, want %d", len(res.Cliques), (nodes+clique-1)/clique)
		}
	}
}
