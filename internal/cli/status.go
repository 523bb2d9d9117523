package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"cdplane/internal/lifecycle"
	"cdplane/internal/scheme"
	"cdplane/internal/status"
)

// statusFlags are the flags of status.
type statusFlags struct {
	namespace  string
	output     string
	watch      bool
	kubeconfig string
	context    string
	timeout    time.Duration
}

func newStatusCommand() *cobra.Command {
	var f statusFlags
	cmd := &cobra.Command{
		Use:   "status [-n NAMESPACE NAME]",
		Short: "Show the control planes, or one ComputeDomain drawn as its cliques",
		Long: `Without arguments: one row per control plane (installed, or named by a plane label on a node,
namespace or ComputeDomain): PLANE (its id, "(legacy)" for the legacy plane), VERSION (the
controller image's tag), CONTROLLER (ready/desired replicas), NODES (nodes labelled with the
plane's id; for the legacy plane, nodes running its kubelet plugin), PLUGIN-READY (of those, nodes
whose kubelet-plugin pod is Ready), NAMESPACES (namespaces labelled with the plane's id, its driver
namespace not counted; for the legacy plane, unlabelled namespaces holding its domains),
DOMAINS-READY and DOMAINS-NOT-READY (by status.status; not reconciled yet counts as not ready),
LEADER (the holder of the controller's leader-election Lease) and LEADER-AGE (since it acquired
the Lease).

With -n NAMESPACE NAME: the ComputeDomain's status and conditions, one row per clique with one cell
per node, name[index] and ✓ Ready, ✗ NotReady (coloured on a terminal unless $NO_COLOR is set),
and every node that holds the domain back, with why: no daemon pod, IMEX blocked (a host
nvidia-imex, a failed NVLink fabric), clique full, daemon not Ready with its last Warning event
(the readiness probe's message), not joined yet.

-o json prints the same as JSON with stable field names (docs/operations.md). --watch draws again
every 2 s until interrupted.`,
		Args: cobra.ArbitraryArgs, // checked in RunE, with the flags, before the kubeconfig is read
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := status.ValidateRequest(f.namespace, args, f.output); err != nil {
				return err
			}
			if f.timeout <= 0 {
				return fmt.Errorf("--timeout must be positive, got %s", f.timeout)
			}
			c, err := statusClient(cmd, f)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			opts := status.Options{Color: f.output == status.OutputText && status.ColorFor(out)}
			draw := func(ctx context.Context, w io.Writer) error {
				ctx, cancel := context.WithTimeout(ctx, f.timeout)
				defer cancel()
				return drawStatus(ctx, w, c, f, args, opts)
			}
			if !f.watch {
				return draw(cmd.Context(), out)
			}
			sep := "\n"
			if f.output == status.OutputJSON {
				sep = ""
			}
			return status.Watch(cmd.Context(), out, status.WatchOptions{Clear: f.output == status.OutputText && status.IsTerminal(out), Separator: sep}, draw)
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&f.namespace, "namespace", "n", "", "Namespace of the ComputeDomain NAME")
	fs.StringVarP(&f.output, "output", "o", status.OutputText, "Output format: text or json")
	fs.BoolVarP(&f.watch, "watch", "w", false, "Draw again every 2 s until interrupted")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	fs.StringVar(&f.context, "context", "", "Kubeconfig context to use")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "How long one reading of the cluster may take, retrying API requests that fail transiently")
	return cmd
}

// drawStatus reads the cluster once and renders what was asked for.
func drawStatus(ctx context.Context, w io.Writer, c client.Client, f statusFlags, args []string, opts status.Options) error {
	now := time.Now()
	if len(args) == 0 {
		p, err := status.GatherPlanes(ctx, c, now)
		if err != nil {
			return err
		}
		if f.output == status.OutputJSON {
			return status.WriteJSON(w, p)
		}
		return status.WritePlanesText(w, p, opts)
	}
	d, err := status.GatherDomain(ctx, c, f.namespace, args[0], now)
	if err != nil {
		return err
	}
	if f.output == status.OutputJSON {
		return status.WriteJSON(w, d)
	}
	return status.WriteDomainText(w, d, opts)
}

// statusClient builds a client as the other commands do (the given kubeconfig or the usual
// loading rules; requests that fail transiently retried within --timeout), with the retry
// notices on stderr so that stdout stays the status alone (-o json).
func statusClient(cmd *cobra.Command, f statusFlags) (client.Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: f.context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	cfg = lifecycle.WithRetries(cfg, cmd.ErrOrStderr(), f.timeout)
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, fmt.Errorf("creating a client: %w", err)
	}
	return c, nil
}
