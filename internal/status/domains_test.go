package status

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/testutil"
)

// listedDomain is a ComputeDomain as a list returns it: created at created, with a status.
func listedDomain(ns, name, uid string, numNodes int, created time.Time, status string, ready int32, nodes ...cdv1beta1.ComputeDomainNode) cdv1beta1.ComputeDomain {
	cd := testutil.MakeComputeDomain(name).Namespace(ns).UID(types.UID("uid-"+uid)).NumNodes(numNodes).Label(cdv1beta1.ControlPlaneLabel, "plane-a").Obj()
	cd.CreationTimestamp = metav1.NewTime(created)
	cd.Status.Status, cd.Status.ReadyNodes, cd.Status.Nodes = status, ready, nodes
	return *cd
}

func TestBuildDomains(t *testing.T) {
	clique := func(uid, id string, nodes ...string) cdv1beta1.ComputeDomainClique {
		c := cdv1beta1.ComputeDomainClique{ObjectMeta: metav1.ObjectMeta{Name: uid + "." + id, Labels: map[string]string{cdv1beta1.ComputeDomainLabel: "uid-" + uid}}}
		for i, n := range nodes {
			c.Daemons = append(c.Daemons, cdv1beta1.ComputeDomainDaemonInfo{NodeName: n, CliqueID: id, Index: i, Status: cdv1beta1.StatusReady})
		}
		return c
	}
	domains := []cdv1beta1.ComputeDomain{
		listedDomain("team-b", "eval", "b", 4, testNow.Add(-90*time.Second), "", 0),
		// Two cliques and a fabric-less member in status.nodes: three groups, as status NAME draws them.
		listedDomain("team-a", "train", "a", 5, testNow.Add(-2*time.Hour), cdv1beta1.StatusReady, 5,
			cdv1beta1.ComputeDomainNode{Name: "n9", CliqueID: "", Index: -1, Status: cdv1beta1.StatusReady}),
		// No cliques (the gate off): its status.nodes alone.
		listedDomain("team-a", "old", "c", 2, testNow.Add(-26*time.Hour), cdv1beta1.StatusNotReady, 1,
			cdv1beta1.ComputeDomainNode{Name: "m1", CliqueID: "x.1", Status: cdv1beta1.StatusReady},
			cdv1beta1.ComputeDomainNode{Name: "m2", CliqueID: "x.1", Status: cdv1beta1.StatusNotReady}),
	}
	cliques := []cdv1beta1.ComputeDomainClique{clique("a", "c.1", "n1", "n2"), clique("a", "c.2", "n3", "n4"), clique("other", "c.1", "z")}
	got := BuildDomains("", domains, cliques, testNow)
	want := Domains{ObservedAt: testNow, Domains: []DomainSummary{
		{Namespace: "team-a", Name: "old", UID: "uid-c", ControlPlaneID: "plane-a", Status: cdv1beta1.StatusNotReady, NumNodes: 2, ReadyNodes: 1, Cliques: 1,
			CreationTimestamp: testNow.Add(-26 * time.Hour), AgeSeconds: 26 * 3600},
		{Namespace: "team-a", Name: "train", UID: "uid-a", ControlPlaneID: "plane-a", Status: cdv1beta1.StatusReady, NumNodes: 5, ReadyNodes: 5, Cliques: 3,
			CreationTimestamp: testNow.Add(-2 * time.Hour), AgeSeconds: 2 * 3600},
		{Namespace: "team-b", Name: "eval", UID: "uid-b", ControlPlaneID: "plane-a", NumNodes: 4,
			CreationTimestamp: testNow.Add(-90 * time.Second), AgeSeconds: 90},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("BuildDomains (-want +got):\n%s", diff)
	}
}

func TestWriteDomainsText(t *testing.T) {
	d := Domains{ObservedAt: testNow, Namespace: "team-a", Domains: []DomainSummary{
		{Namespace: "team-a", Name: "train", Status: "Ready", NumNodes: 36, ReadyNodes: 36, Cliques: 2, AgeSeconds: 2 * 3600},
		{Namespace: "team-a", Name: "eval\x1b[2J", NumNodes: 4, AgeSeconds: 90},
	}}
	cases := map[string]struct {
		d    Domains
		want string
	}{
		"one namespace": {d: d, want: "" +
			"NAME         STATUS  NODES  CLIQUES  AGE\n" +
			"train        Ready   36/36  2        120m\n" +
			"eval\\x1b[2J  -       0/4    0        90s\n"},
		"every namespace": {d: Domains{Domains: d.Domains[:1]}, want: "" +
			"NAMESPACE  NAME   STATUS  NODES  CLIQUES  AGE\n" +
			"team-a     train  Ready   36/36  2        120m\n"},
		"none in the namespace": {d: Domains{Namespace: "team-c"}, want: "No ComputeDomain found in namespace team-c.\n"},
		"none anywhere":         {d: Domains{}, want: "No ComputeDomain found in any namespace.\n"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteDomainsText(&b, tc.d, Options{}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, b.String()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
