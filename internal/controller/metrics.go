package controller

import (
	"context"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"cdplane/internal/controller/computedomain"
	"cdplane/internal/metrics"
)

// countingClient is the manager's NewClient: controller-runtime's client with every write it
// sends counted in cdplane_api_writes_total. Every controller of the manager writes through it
// (mgr.GetClient()); the leader-election lease and events go through clients of their own and
// are not counted.
func countingClient(planeID string) client.NewClientFunc {
	return func(cfg *rest.Config, opts client.Options) (client.Client, error) {
		c, err := client.New(cfg, opts)
		if err != nil {
			return nil, err
		}
		return metrics.CountWrites(c, planeID), nil
	}
}

// addMetrics adds what feeds the controller's gauges: the plane's domains by status
// (computedomain.AddMetrics) and cdplane_controller_leader.
func addMetrics(mgr ctrl.Manager, planeID string) error {
	if err := computedomain.AddMetrics(mgr, planeID); err != nil {
		return err
	}
	return mgr.Add(&leaderMetric{elected: mgr.Elected(), planeID: planeID})
}

// leaderMetric holds cdplane_controller_leader: 0 from the start, 1 from the moment the manager
// leads (at once without leader election) until it stops. A replica that loses the lease exits.
type leaderMetric struct {
	elected <-chan struct{}
	planeID string
}

// NeedLeaderElection is false: a standby replica says it waits.
func (*leaderMetric) NeedLeaderElection() bool { return false }

func (l *leaderMetric) Start(ctx context.Context) error {
	g := metrics.ControllerLeader.WithLabelValues(l.planeID)
	g.Add(0)
	select {
	case <-ctx.Done():
		return nil
	case <-l.elected:
	}
	g.Inc()
	<-ctx.Done()
	g.Dec()
	return nil
}
