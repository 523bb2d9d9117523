package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/computedomain"
	"cdplane/internal/controller/membership"
	"cdplane/internal/testutil"
)

// etcdMaxRequestBytes is etcd's default --max-request-bytes, which the test cluster's etcd keeps
// (internal/sim/controlplane passes no such flag), as production clusters mostly do.
const etcdMaxRequestBytes = 1572864

// Worst-case values: node names of 253 characters (the most a node name may have), IPv6
// addresses of 45 (the most, IPv4-mapped), clique ids of 63 (the most a label value may have).
func worstNode(i int) string { return fmt.Sprintf("%s-%06d", strings.Repeat("n", 246), i) }

const worstIP = "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255"

// worstIPOf is a distinct address of worstIP's length for each i below 1,000,000: membership
// gives each address to one node only.
func worstIPOf(i int) string {
	return fmt.Sprintf("ffff:ffff:ffff:ffff:ffff:ffff:255.255.%03d.%03d", i/1000, i%1000)
}

func worstClique(i int) string { return fmt.Sprintf("7f9c1b2e-0d7a-4c1f-9a55-3b6f2f0e8c11.%026d", i) }

// worstInput is n worst-case nodes of 18 per clique, Ready, as Compute sees them.
func worstInput(n int, statusOnly bool) membership.Input {
	in := membership.Input{LabelledNodes: sets.New[string](), AllocatedNodes: sets.New[string](), MaxNodes: 18, StatusOnly: statusOnly}
	for i := range n {
		node := worstNode(i)
		in.LabelledNodes.Insert(node)
		in.AllocatedNodes.Insert(node)
		in.Pods = append(in.Pods, membership.Pod{NodeName: node, IP: worstIPOf(i), CliqueID: worstClique(i / 18), Labelled: true, Ready: true, Owned: true})
	}
	return in
}

// sizer applies statuses to one domain that no controller reconciles, as the controller does
// (server-side apply of the status subresource under its field manager), and measures the
// stored object: its JSON, managed fields included, is what the apiserver sends etcd.
type sizer struct {
	t  *testing.T
	c  client.Client
	cd *cdv1beta1.ComputeDomain
}

func (s *sizer) apply(st cdv1beta1.ComputeDomainStatus) (int, error) {
	ctx := context.Background()
	if err := s.c.Status().Apply(ctx, computedomain.StatusApply(s.cd, st), client.FieldOwner("cdplane-controller"), client.ForceOwnership); err != nil {
		return 0, err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(cdv1beta1.GroupVersion.WithKind("ComputeDomain"))
	if err := s.c.Get(ctx, client.ObjectKeyFromObject(s.cd), u); err != nil {
		s.t.Fatal(err)
	}
	raw, err := json.Marshal(u.Object)
	if err != nil {
		s.t.Fatal(err)
	}
	return len(raw), nil
}

// full is the status of n worst-case nodes with every one listed, whatever the bounds say.
func full(n int) cdv1beta1.ComputeDomainStatus {
	res := membership.Compute(worstInput(n, false))
	st := membership.Aggregate(res, 0, 1, nil)
	st.Nodes = nil
	for _, e := range res.All() {
		st.Nodes = append(st.Nodes, cdv1beta1.ComputeDomainNode{Name: e.NodeName, IPAddress: e.IPAddress, CliqueID: e.CliqueID, Index: e.Index, Status: e.Status})
	}
	return st
}

// TestStatusSizeMeasured measures a domain's stored size against etcd's request limit with
// worst-case names and addresses: 4,096 entries (the count cap alone) do not fit; the largest
// count that does is found; the controller's estimate is an upper bound of the measured cost of
// an entry; and what the controller writes at its bounds is stored, with a user's 250 KB of
// annotations on the domain too.
func TestStatusSizeMeasured(t *testing.T) {
	t.Parallel()
	ns := testCluster.Namespace(t, nil)
	cd := testutil.MakeComputeDomain("size").Namespace(ns).Obj()
	if err := testCluster.Client.Create(context.Background(), cd); err != nil {
		t.Fatal(err)
	}
	s := &sizer{t: t, c: testCluster.Client, cd: cd}

	base, err := s.apply(full(0))
	if err != nil {
		t.Fatal(err)
	}
	// Refused by etcd ("request is too large", above 1.5 MiB) or, above 2 MiB, by the
	// apiserver's etcd client ("trying to send message larger than max").
	if _, err := s.apply(full(cdv1beta1.MaxStatusNodes)); err == nil || !tooLarge(err) {
		t.Fatalf("applying %d worst-case entries: %v, want the request refused as too large", cdv1beta1.MaxStatusNodes, err)
	} else {
		t.Logf("%d worst-case entries: %v", cdv1beta1.MaxStatusNodes, err)
	}
	// The largest count that is stored.
	sizes := map[int]int{}
	n := sort.Search(cdv1beta1.MaxStatusNodes, func(n int) bool {
		size, err := s.apply(full(n + 1))
		if err != nil {
			if !tooLarge(err) {
				t.Fatalf("applying %d worst-case entries: %v", n+1, err)
			}
			return true
		}
		sizes[n+1] = size
		return false
	})
	if n == 0 || sizes[n] == 0 {
		t.Fatalf("no count of worst-case entries is stored (search ended at %d)", n)
	}
	measured := float64(sizes[n]-base) / float64(n)
	e := membership.Entry{NodeName: worstNode(0), IPAddress: worstIP, CliqueID: worstClique(0), Index: 17, Status: cdv1beta1.StatusReady}
	estimated := float64(membership.EntryBytes(e)) + float64(membership.SummaryBytes(e.CliqueID))/18
	t.Logf("stored object: %d bytes without entries; at most %d worst-case entries are stored (%d bytes); %.1f bytes per entry measured, %.1f estimated",
		base, n, sizes[n], measured, estimated)
	if estimated < measured {
		t.Errorf("the estimate of %.1f bytes per entry is below the %.1f measured", estimated, measured)
	}

	// What the controller writes at its bounds, on a domain created with a user's 250 KB of
	// annotations.
	big := testutil.MakeComputeDomain("size-annotated").Namespace(ns).Obj()
	big.Annotations = map[string]string{"example.com/big": strings.Repeat("a", 250_000)}
	if err := testCluster.Client.Create(context.Background(), big); err != nil {
		t.Fatal(err)
	}
	s = &sizer{t: t, c: testCluster.Client, cd: big}
	bounded := membership.Compute(worstInput(cdv1beta1.MaxStatusNodes, true))
	k := len(bounded.All())
	size, err := s.apply(membership.Aggregate(bounded, 0, 1, nil))
	if err != nil {
		t.Fatalf("the status the controller writes with ComputeDomainCliques off (%d of %d worst-case nodes admitted): %v", k, cdv1beta1.MaxStatusNodes, err)
	}
	t.Logf("ComputeDomainCliques off: %d worst-case entries admitted, %d waiting; stored object with 250 KB of annotations: %d bytes, %d under etcd's limit",
		k, len(bounded.Overflow), size, etcdMaxRequestBytes-size)
	if k >= n || k < 1000 {
		t.Errorf("%d worst-case entries admitted; want fewer than the %d that etcd takes, and at least 1000", k, n)
	}

	cliques := membership.Compute(worstInput(cdv1beta1.MaxStatusNodes, false))
	for i := range 50 {
		cliques.Fabricless = append(cliques.Fabricless, membership.Entry{NodeName: worstNode(100000 + i), IPAddress: worstIP, Index: -1, Status: cdv1beta1.StatusReady})
	}
	st := membership.Aggregate(cliques, 0, 1, nil)
	size, err = s.apply(st)
	if err != nil {
		t.Fatalf("the status the controller writes with ComputeDomainCliques on (%d worst-case nodes): %v", cdv1beta1.MaxStatusNodes+50, err)
	}
	t.Logf("ComputeDomainCliques on: %d worst-case nodes, status.nodes lists the %d fabric-less ones; stored object: %d bytes", cdv1beta1.MaxStatusNodes+50, len(st.Nodes), size)
	if len(st.Nodes) != 50 {
		t.Errorf("status.nodes lists %d entries, want the 50 fabric-less nodes", len(st.Nodes))
	}
}

func tooLarge(err error) bool {
	return strings.Contains(err.Error(), "too large") || strings.Contains(err.Error(), "larger than max")
}
