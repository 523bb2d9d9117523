package lifecycle

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCheckNodeAssignments(t *testing.T) {
	record := map[string]string{"held": "a", "relabelled": "a", "moved": "a", "gone": "a", "of-b": "b", "b-unlabelled": "b"}
	nodes := map[string]string{"held": "a", "relabelled": "", "moved": "b", "of-b": "b", "b-unlabelled": "", "unrecorded": "a", "legacy": ""}
	type finding struct {
		Node, ID string
		Absent   bool
		Says     string
	}
	cases := map[string]struct {
		id      string
		want    []finding
		holding int
	}{
		"plane a": {id: "a", holding: 1, want: []finding{
			{Node: "gone", ID: "a", Absent: true, Says: `node gone was assigned to control plane "a" and does not exist: if it registers again, run cdplane assign node gone --control-plane-id a`},
			{Node: "moved", ID: "a", Says: `node moved was assigned to control plane "a" but is labelled for control plane "b"`},
			{Node: "relabelled", ID: "a", Says: `node relabelled was assigned to control plane "a" but its label is gone (re-registered?): run cdplane assign node relabelled --control-plane-id a`},
			{Node: "unrecorded", ID: "a", Says: `node unrecorded carries control plane "a"'s label but its assignment is not recorded`},
		}},
		"plane b": {id: "b", holding: 1, want: []finding{
			{Node: "b-unlabelled", ID: "b", Says: "cdplane assign node b-unlabelled --control-plane-id b"},
		}},
		"every plane": {holding: 2, want: []finding{
			{Node: "b-unlabelled", ID: "b"}, {Node: "gone", ID: "a", Absent: true}, {Node: "moved", ID: "a"},
			{Node: "relabelled", ID: "a"}, {Node: "unrecorded", ID: "a"},
		}},
		"a plane with nothing recorded": {id: "c"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, holding := CheckNodeAssignments(tc.id, record, nodes)
			if holding != tc.holding {
				t.Errorf("holding %d, want %d", holding, tc.holding)
			}
			var gotF []finding
			for i, f := range got {
				gotF = append(gotF, finding{Node: f.Node, ID: f.ID, Absent: f.Absent})
				if i < len(tc.want) && !strings.Contains(f.Message, tc.want[i].Says) {
					t.Errorf("finding %s: %q does not say %q", f.Node, f.Message, tc.want[i].Says)
				}
			}
			var wantF []finding
			for _, f := range tc.want {
				wantF = append(wantF, finding{Node: f.Node, ID: f.ID, Absent: f.Absent})
			}
			if diff := cmp.Diff(wantF, gotF); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}
