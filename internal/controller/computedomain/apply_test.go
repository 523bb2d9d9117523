package computedomain

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	cdv1beta1 "cdplane/api/v1beta1"
	cdapply "cdplane/api/v1beta1/applyconfiguration/api/v1beta1"
	"cdplane/internal/testutil"
)

func TestStatusApply(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ready := metav1.Condition{
		Type: cdv1beta1.ConditionReady, Status: metav1.ConditionTrue, Reason: cdv1beta1.ReasonAllNodesReady,
		Message: "2 of 2 nodes ready", LastTransitionTime: t0, ObservedGeneration: 3,
	}
	readyAC := metav1ac.Condition().WithType(cdv1beta1.ConditionReady).WithStatus(metav1.ConditionTrue).
		WithReason(cdv1beta1.ReasonAllNodesReady).WithMessage("2 of 2 nodes ready").WithLastTransitionTime(t0).WithObservedGeneration(3)
	domain := func(s *cdapply.ComputeDomainStatusApplyConfiguration) *cdapply.ComputeDomainApplyConfiguration {
		return cdapply.ComputeDomain("cd", "ns").WithUID(testUID).WithStatus(s)
	}
	cases := map[string]struct {
		status cdv1beta1.ComputeDomainStatus
		want   *cdapply.ComputeDomainApplyConfiguration
	}{
		"every field": {
			status: cdv1beta1.ComputeDomainStatus{
				Status: cdv1beta1.StatusReady, ReadyNodes: 2, TotalNodes: 2,
				Nodes: []cdv1beta1.ComputeDomainNode{
					{Name: "n1", IPAddress: "127.0.0.1", CliqueID: "uuid.1", Index: 0, Status: cdv1beta1.StatusReady},
					{Name: "f1", IPAddress: "127.0.0.2", CliqueID: "", Index: cdv1beta1.FabriclessIndex, Status: cdv1beta1.StatusReady},
				},
				Cliques:    []cdv1beta1.ComputeDomainCliqueSummary{{ID: "uuid.1", Ready: 1, Total: 1}},
				Conditions: []metav1.Condition{ready},
			},
			want: domain(cdapply.ComputeDomainStatus().WithStatus(cdv1beta1.StatusReady).WithReadyNodes(2).WithTotalNodes(2).
				WithNodes(
					cdapply.ComputeDomainNode().WithName("n1").WithIPAddress("127.0.0.1").WithCliqueID("uuid.1").WithIndex(0).WithStatus(cdv1beta1.StatusReady),
					cdapply.ComputeDomainNode().WithName("f1").WithIPAddress("127.0.0.2").WithCliqueID("").WithIndex(-1).WithStatus(cdv1beta1.StatusReady),
				).
				WithCliques(cdapply.ComputeDomainCliqueSummary().WithID("uuid.1").WithReady(1).WithTotal(1)).
				WithConditions(readyAC)),
		},
		"empty status and node status are left out; counts are kept at zero": {
			status: cdv1beta1.ComputeDomainStatus{
				Nodes: []cdv1beta1.ComputeDomainNode{{Name: "n1", IPAddress: "127.0.0.1", CliqueID: "uuid.1", Index: 0}},
			},
			want: domain(cdapply.ComputeDomainStatus().WithReadyNodes(0).WithTotalNodes(0).
				WithNodes(cdapply.ComputeDomainNode().WithName("n1").WithIPAddress("127.0.0.1").WithCliqueID("uuid.1").WithIndex(0))),
		},
		"nothing yet": {
			want: domain(cdapply.ComputeDomainStatus().WithReadyNodes(0).WithTotalNodes(0)),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, StatusApply(testDomain(), tc.status)); diff != "" {
				t.Errorf("status apply configuration (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCliqueApply(t *testing.T) {
	dsRef := testutil.ControllerRef("apps/v1", "DaemonSet", "computedomain-daemon-"+testUID, "ds-uid")
	plainRef := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "x-uid"}
	labels := map[string]string{cdv1beta1.ComputeDomainLabel: testUID, cdv1beta1.CliqueIDLabel: "uuid.1"}
	clique := func() *testutil.CliqueWrapper {
		return testutil.MakeClique(testUID+".uuid.1", testDriverNS)
	}
	withLabels := func(w *testutil.CliqueWrapper) *cdv1beta1.ComputeDomainClique {
		c := w.Obj()
		c.Labels = labels
		c.TotalDaemons = int32(len(c.Daemons))
		for _, d := range c.Daemons {
			if d.Status == cdv1beta1.StatusReady {
				c.ReadyDaemons++
			}
		}
		return c
	}
	want := func() *cdapply.ComputeDomainCliqueApplyConfiguration {
		return cdapply.ComputeDomainClique(testUID+".uuid.1", testDriverNS).WithLabels(labels)
	}
	cases := map[string]struct {
		clique *cdv1beta1.ComputeDomainClique
		want   *cdapply.ComputeDomainCliqueApplyConfiguration
	}{
		"owner and daemons": {
			clique: withLabels(clique().OwnedBy(dsRef).
				Daemon("n1", "127.0.0.1", "uuid.1", 0, cdv1beta1.StatusReady).
				Daemon("n2", "127.0.0.2", "uuid.1", 1, cdv1beta1.StatusNotReady)),
			want: want().WithReadyDaemons(1).WithTotalDaemons(2).
				WithOwnerReferences(metav1ac.OwnerReference().WithAPIVersion("apps/v1").WithKind("DaemonSet").
					WithName("computedomain-daemon-"+testUID).WithUID(types.UID("ds-uid")).WithController(true).WithBlockOwnerDeletion(true)).
				WithDaemons(
					cdapply.ComputeDomainDaemonInfo().WithNodeName("n1").WithIPAddress("127.0.0.1").WithCliqueID("uuid.1").WithIndex(0).WithStatus(cdv1beta1.StatusReady),
					cdapply.ComputeDomainDaemonInfo().WithNodeName("n2").WithIPAddress("127.0.0.2").WithCliqueID("uuid.1").WithIndex(1).WithStatus(cdv1beta1.StatusNotReady),
				),
		},
		"unset owner flags and an empty daemon status are left out": {
			clique: withLabels(clique().OwnedBy(plainRef).Daemon("n1", "127.0.0.1", "uuid.1", 0, "")),
			want: want().WithReadyDaemons(0).WithTotalDaemons(1).
				WithOwnerReferences(metav1ac.OwnerReference().WithAPIVersion("v1").WithKind("ConfigMap").WithName("x").WithUID(types.UID("x-uid"))).
				WithDaemons(cdapply.ComputeDomainDaemonInfo().WithNodeName("n1").WithIPAddress("127.0.0.1").WithCliqueID("uuid.1").WithIndex(0)),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, cliqueApply(tc.clique)); diff != "" {
				t.Errorf("clique apply configuration (-want +got):\n%s", diff)
			}
		})
	}
}

// What goes on the wire: an empty optional string is not sent (applying it would set an enum to
// ""), while required fields that may be empty (a fabric-less node's clique id) and zero counts
// are.
func TestApplyOmitsEmptyOptionalStrings(t *testing.T) {
	status := cdv1beta1.ComputeDomainStatus{Nodes: []cdv1beta1.ComputeDomainNode{{Name: "f1", IPAddress: "127.0.0.1", Index: -1}}}
	clique := testutil.MakeClique(testUID+".uuid.1", testDriverNS).Daemon("n1", "127.0.0.1", "uuid.1", 0, "").Obj()
	cases := map[string]struct {
		apply    any
		want     []string
		wantNone []string
	}{
		"status": {
			apply:    StatusApply(testDomain(), status),
			want:     []string{`"readyNodes":0`, `"totalNodes":0`, `"cliqueID":""`, `"index":-1`},
			wantNone: []string{`"status":""`},
		},
		"clique": {
			apply:    cliqueApply(clique),
			want:     []string{`"nodeName":"n1"`, `"index":0`},
			wantNone: []string{`"status":""`, `"controller"`, `"blockOwnerDeletion"`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			raw, err := json.Marshal(tc.apply)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.want {
				if !strings.Contains(string(raw), s) {
					t.Errorf("%s lacks %s", raw, s)
				}
			}
			for _, s := range tc.wantNone {
				if strings.Contains(string(raw), s) {
					t.Errorf("%s contains %s", raw, s)
				}
			}
		})
	}
}
