package sim

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/plot"
	"cdplane/internal/scheme"
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

// TestReadBreakdownRetries: the timestamps of a job that timed out are read from an apiserver
// still overloaded by it; a list that fails is retried rather than losing the breakdown, and
// an interrupt ends the retries with an error that says what failed last.
func TestReadBreakdownRetries(t *testing.T) {
	cd := &cdv1beta1.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Name: "job-2", Namespace: "default", UID: "uid-1"}}
	o := JobOptions{Name: "job-2", Namespace: "default", Nodes: 2}
	failing := func(fails *int) client.Client {
		return fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(cd.DeepCopy()).WithInterceptorFuncs(interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				if *fails > 0 {
					*fails--
					return apierrors.NewTimeoutError("the server was unable to return a response in the time allotted", 1)
				}
				return c.List(ctx, list, opts...)
			},
		}).Build()
	}

	fails := 2
	b, err := readBreakdownRetrying(context.Background(), failing(&fails), cd, o)
	if err != nil || b == nil {
		t.Fatalf("after two failed lists: breakdown %v, err %v", b, err)
	}
	if fails != 0 {
		t.Errorf("%d failures left unread", fails)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	fails = 1 << 30
	if _, err := readBreakdownRetrying(ctx, failing(&fails), cd, o); err == nil || !strings.Contains(err.Error(), "unable to return a response") {
		t.Errorf("interrupted: err %v, want the last error named", err)
	}

	// RunJob reads an interrupted job's breakdown all the same, from a context the interrupt
	// did not end, bounded by interruptedReadFor; a job still running reads in its own.
	if rctx, rcancel, interrupted := breakdownContext(context.Background()); interrupted || rctx.Err() != nil {
		t.Errorf("not interrupted: interrupted %v, err %v", interrupted, rctx.Err())
	} else {
		rcancel()
	}
	rctx, rcancel, interrupted := breakdownContext(ctx)
	defer rcancel()
	if !interrupted {
		t.Errorf("after an interrupt: not said to be interrupted")
	}
	if deadline, ok := rctx.Deadline(); !ok || time.Until(deadline) > interruptedReadFor {
		t.Errorf("after an interrupt: deadline %v (set: %v), want within %s", deadline, ok, interruptedReadFor)
	}
	fails = 1
	if b, err := readBreakdownRetrying(rctx, failing(&fails), cd, o); err != nil || b == nil {
		t.Errorf("after an interrupt: breakdown %v, err %v", b, err)
	}
}
