package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"cdplane/internal/bench"
	"cdplane/internal/sim/controlplane"
)

func newBenchCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Benchmarks against a real apiserver"}
	var (
		o          bench.Options
		modes      string
		kubeconfig string
		asJSON     bool
	)
	reg := &cobra.Command{
		Use:   "registration",
		Short: "N daemons joining one ComputeDomain: this design against the original's protocols and the floor",
		Long: `Creates a ComputeDomain, N nodes and N daemon pods, then runs N daemon instances in this process
(daemon service-account identity, the daemon's client QPS/burst) while the benchmark plays each
node's kubelet (pod IP, Ready once the daemon's check passes; per-node identities). IMEX is an
instant stand-in: the benchmark measures registration through the API. Each mode runs on fresh
objects in the same control plane. The floor is the time for N instances to make the writes no
protocol avoids (pod label, pod status) with the same identities, QPS and watches open.
Conflicts (409) and throttling (429) come from the apiserver's own metrics.

Without --kubeconfig it starts its own etcd and kube-apiserver from the cached builds
(hack/k8s-bins.sh builds them on first use).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Modes = splitModes(modes)
			if err := o.Validate(); err != nil {
				return err
			}
			if !asJSON {
				o.Progress = cmd.ErrOrStderr()
			}
			// Thousands of in-process watches log every reconnect; keep the figures readable.
			klog.SetOutput(io.Discard)
			klog.LogToStderr(false)
			cfg, stop, err := benchCluster(cmd, kubeconfig)
			if err != nil {
				return err
			}
			defer stop()
			rep, err := bench.Run(cmd.Context(), cfg, o)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			printReport(cmd, rep)
			return nil
		},
	}
	f := reg.Flags()
	f.IntVar(&o.Nodes, "nodes", 288, "Daemon instances (nodes) in the domain")
	f.IntVar(&o.CliqueSize, "clique-size", 18, "Nodes per clique")
	f.StringVar(&o.Arrival, "arrival", "burst", "burst: all daemons start at once; ramp: starts spread over --ramp")
	f.DurationVar(&o.Ramp, "ramp", 10*time.Second, "Spread of the starts with --arrival ramp")
	f.StringVar(&modes, "modes", strings.Join(bench.AllModes, ","), "Modes to run, comma-separated")
	f.DurationVar(&o.Timeout, "timeout", 3*time.Minute, "Longest wait for one mode's domain to be Ready; a mode that takes longer is reported with this as a lower bound")
	f.StringVar(&kubeconfig, "kubeconfig", "", "Use this cluster instead of starting one")
	f.BoolVar(&asJSON, "json", false, "Print the figures as JSON")
	cmd.AddCommand(reg, newMemoryCommand())
	return cmd
}

func newMemoryCommand() *cobra.Command {
	var (
		o          bench.MemoryOptions
		kubeconfig string
	)
	mem := &cobra.Command{
		Use:   "memory",
		Short: "A plane controller's heap on an empty cluster and with another plane's objects present",
		Long: `Runs plane-a's controller (ComputeDomains, cleanup, Secret mirroring) in this process until its
caches synced and reads the Go heap after two GCs: first on an empty cluster, then with --objects
Secrets, daemon pods and cliques of plane-b present. As a control it measures plane-b's controller,
which does cache those objects. Without --kubeconfig it starts its own etcd and kube-apiserver.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			klog.SetOutput(io.Discard)
			klog.LogToStderr(false)
			o.Progress = cmd.ErrOrStderr()
			cfg, stop, err := benchCluster(cmd, kubeconfig)
			if err != nil {
				return err
			}
			defer stop()
			rep, err := bench.Memory(cmd.Context(), cfg, o)
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(rep)
		},
	}
	mem.Flags().IntVar(&o.Objects, "objects", 10000, "Secrets, pods and cliques of the other plane (each)")
	mem.Flags().StringVar(&kubeconfig, "kubeconfig", "", "Use this cluster instead of starting one")
	return mem
}

func splitModes(s string) []string {
	var out []string
	for _, m := range strings.Split(s, ",") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	return out
}

func benchCluster(cmd *cobra.Command, kubeconfig string) (*rest.Config, func(), error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		return cfg, func() {}, err
	}
	fmt.Fprintln(cmd.ErrOrStderr(), "== starting etcd and kube-apiserver (builds them on first use)")
	binDir, err := controlplane.BinDir(cmd.Context())
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "cdplane-bench-")
	if err != nil {
		return nil, nil, fmt.Errorf("creating the control plane's directory: %w", err)
	}
	cp, err := controlplane.Start(cmd.Context(), controlplane.Options{Dir: dir, BinDir: binDir, InstallCRDs: true,
		APIServerArgs: map[string][]string{
			// Room for thousands of watches and concurrent writers, as a production apiserver has.
			"max-requests-inflight": {"800"}, "max-mutating-requests-inflight": {"400"},
			// The benchmark's node identities are authorized by its own ClusterRole, not the
			// Node authorizer, as in every run measured so far.
			"authorization-mode": {"RBAC"},
		}})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	stop := func() {
		if err := cp.Stop(15 * time.Second); err != nil {
			fmt.Fprintln(cmd.ErrOrStderr(), "stopping the control plane:", err)
			return
		}
		_ = os.RemoveAll(dir)
	}
	cfg, err := cp.AdminConfig()
	if err != nil {
		stop()
		return nil, nil, err
	}
	cfg.QPS, cfg.Burst = 200, 400
	return cfg, stop, nil
}

func printReport(cmd *cobra.Command, rep *bench.Report) {
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "registration: %d nodes, cliques of %d, %s arrival; floor %.2fs\n", rep.Nodes, rep.CliqueSize, rep.Arrival, rep.FloorSeconds)
	fmt.Fprintf(w, "%-18s %9s %8s %12s %10s %8s %8s %9s %9s\n", "mode", "seconds", "xfloor", "writes/dmn", "ctrl-wr", "409s", "429s", "p50(ms)", "p99(ms)")
	for _, m := range bench.AllModes {
		r, ok := rep.Modes[m]
		if !ok {
			continue
		}
		more := ""
		if r.TimedOut {
			more = "  (not Ready within the timeout: seconds is a lower bound)"
		}
		fmt.Fprintf(w, "%-18s %9.2f %8.2f %12.2f %10d %8.0f %8.0f %9.0f %9.0f%s\n", m, r.Seconds, r.RatioToFloor, r.WritesPerDaemon,
			r.ControllerWrites, r.Conflicts, r.Throttled, r.P50Ms, r.P99Ms, more)
	}
}
