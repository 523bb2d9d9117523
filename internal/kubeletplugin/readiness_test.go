package kubeletplugin

import (
	"strings"
	"testing"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/testutil"
)

func TestDaemonReady(t *testing.T) {
	clique := func(status string) *cdv1beta1.ComputeDomainClique {
		return testutil.MakeClique("uid.c", "ns").Daemon("n1", "10.0.0.1", "c", 0, status).Daemon("n2", "10.0.0.2", "c", 1, cdv1beta1.StatusReady).Obj()
	}
	cd := func(status string) *cdv1beta1.ComputeDomain {
		c := testutil.MakeComputeDomain("cd").Obj()
		c.Status.Nodes = []cdv1beta1.ComputeDomainNode{{Name: "n1", CliqueID: "c", Status: status}}
		return c
	}
	cases := map[string]struct {
		clique     *cdv1beta1.ComputeDomainClique
		cd         *cdv1beta1.ComputeDomain
		want       bool
		wantReason string
	}{
		"ready in clique":                 {clique: clique(cdv1beta1.StatusReady), cd: cd(""), want: true},
		"ready in status only":            {clique: nil, cd: cd(cdv1beta1.StatusReady), want: true},
		"ready in status, clique lagging": {clique: clique(cdv1beta1.StatusNotReady), cd: cd(cdv1beta1.StatusReady), want: true},
		"not ready in clique": {clique: clique(cdv1beta1.StatusNotReady), cd: testutil.MakeComputeDomain("cd").Obj(),
			wantReason: "clique uid.c lists the node as NotReady; ComputeDomain status does not list the node yet"},
		"missing from clique": {clique: testutil.MakeClique("uid.c", "ns").Obj(), cd: nil,
			wantReason: "clique uid.c does not list the node yet"},
		"not ready in status": {cd: cd(cdv1beta1.StatusNotReady), wantReason: "ComputeDomain status lists the node as NotReady"},
		"no status":           {cd: cd(""), wantReason: "lists the node as without status"},
		"nothing":             {wantReason: "ComputeDomain status does not list the node yet"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, reason := DaemonReady("n1", tc.clique, tc.cd)
			if got != tc.want || !strings.Contains(reason, tc.wantReason) {
				t.Errorf("DaemonReady = %v %q, want %v containing %q", got, reason, tc.want, tc.wantReason)
			}
		})
	}
}
