package sim

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"cdplane/internal/plot"
)

func TestJobResultChart(t *testing.T) {
	cases := map[string]struct {
		res  JobResult
		want plot.Chart
	}{
		"samples become two series over the seconds since the apply": {
			res: JobResult{Nodes: 4, Name: "job-4", Namespace: "plane-a-workloads", Samples: []JobSample{
				{},
				{Seconds: 1.02, ReadyNodes: 1},
				{Seconds: 2.5, ReadyNodes: 4, PodsRunning: 0},
				{Seconds: 2.61, ReadyNodes: 4, PodsRunning: 3},
				{Seconds: 3.7, ReadyNodes: 4, PodsRunning: 4},
			}},
			want: plot.Chart{
				Title: "A 4-node ComputeDomain job (plane-a-workloads/job-4)", XLabel: "seconds since apply", YLabel: "count",
				Series: []plot.Series{
					{Name: "nodes Ready in the domain", Points: []plot.Point{{X: 0, Y: 0}, {X: 1.02, Y: 1}, {X: 2.5, Y: 4}, {X: 2.61, Y: 4}, {X: 3.7, Y: 4}}},
					{Name: "pods Running", Points: []plot.Point{{X: 0, Y: 0}, {X: 1.02, Y: 0}, {X: 2.5, Y: 0}, {X: 2.61, Y: 3}, {X: 3.7, Y: 4}}},
				},
			},
		},
		"no samples: two empty series": {
			res: JobResult{Nodes: 2, Name: "j", Namespace: "default"},
			want: plot.Chart{
				Title: "A 2-node ComputeDomain job (default/j)", XLabel: "seconds since apply", YLabel: "count",
				Series: []plot.Series{
					{Name: "nodes Ready in the domain", Points: []plot.Point{}},
					{Name: "pods Running", Points: []plot.Point{}},
				},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.res.Chart()); diff != "" {
				t.Errorf("chart (-want +got):\n%s", diff)
			}
		})
	}
}
