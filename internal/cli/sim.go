package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"cdplane/internal/kubeletplugin"
	"cdplane/internal/plot"
	"cdplane/internal/sim"
)

func newSimCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "sim", Short: "A simulated NVL72 cluster on this machine: real control plane, simulated nodes, NVML and IMEX"}
	var o sim.Options
	var planes string
	up := &cobra.Command{
		Use:   "up",
		Short: "Start a simulated cluster in the background and install cdplane on it",
		Example: `  cdplane sim up
  cdplane sim up --nodes 72 --planes plane-a,plane-b
  cdplane sim up --nodes 1152 --runner in-process`,
		Long: `Builds (once, cached) etcd, the Kubernetes control plane and kubectl from source, and
cdplane's binaries; starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler on
loopback, then the simulated kubelet for --nodes nodes in racks of --rack-size (one NVLink clique
per rack), installs the prerequisites and the plane(s) through the Helm charts, and returns with
everything running in the background. Prints what to export and what to try next.
A state directory holding a running sim is refused (or reused with --reuse); the leftover of a
stopped one is removed first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Planes = sim.ParsePlanes(planes)
			o.Out = cmd.OutOrStdout()
			if err := o.Check(); err != nil {
				return usage(err)
			}
			st, err := sim.Up(cmd.Context(), o)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "\nexport KUBECONFIG=%s\nexport PATH=%s:$PATH\n\n", st.ControlPlane.Kubeconfig, st.KubectlDir)
			fmt.Fprintf(out, "Try:\n  kubectl get nodes\n  kubectl apply -f %s/examples/imex-channel-injection.yaml\n", st.Repo)
			fmt.Fprintf(out, "  kubectl get computedomains,pods\n  kubectl logs job/imex-channel-injection\n")
			fmt.Fprintf(out, "Logs of the control plane and the simulated kubelet: %s/logs\nStop it: cdplane sim down\n", o.StateDir)
			return nil
		},
	}
	up.Flags().IntVar(&o.Nodes, "nodes", 36, "Simulated nodes")
	up.Flags().IntVar(&o.RackSize, "rack-size", 18, "Nodes per rack (one NVLink clique per rack)")
	up.Flags().IntVar(&o.GPUsPerNode, "gpus-per-node", 4, "GPUs per node")
	up.Flags().IntVar(&o.FabricLess, "fabricless", 0, "Nodes (the last ones) without an NVLink fabric")
	up.Flags().IntVar(&o.FailedFabric, "failed-fabric", 0, "Nodes (before the fabric-less ones) whose fabric registration failed")
	up.Flags().StringVar(&planes, "planes", "", "Comma-separated control-plane ids sharing the nodes (default: the legacy plane)")
	up.Flags().IntVar(&o.NumChannels, "num-channels", kubeletplugin.DefaultNumChannels, "IMEX channel devices each node publishes (the chart's default: channel-0 only)")
	up.Flags().StringVar(&o.StateDir, "state-dir", sim.DefaultStateDir(), "Directory of the sim's state, logs and node directories (keep it short: it holds Unix sockets)")
	up.Flags().StringVar(&o.Repo, "repo", "", "cdplane checkout to build from (default: found from the working directory)")
	up.Flags().StringVar(&o.Runner, "runner", sim.RunnerAuto, fmt.Sprintf("How the simulated kubelet runs cdplane's pods: %s, %s (one goroutine-based instance per pod, same code), or %s (in-process above %d nodes)", sim.RunnerProcess, sim.RunnerInProcess, sim.RunnerAuto, sim.InProcessAbove))
	up.Flags().BoolVar(&o.Reuse, "reuse", false, "Use a sim already running from --state-dir instead of refusing")
	up.Flags().DurationVar(&o.Timeout, "timeout", 10*time.Minute, "How long to wait for each step")
	up.Flags().StringVar(&o.KubernetesVersion, "kubernetes-version", "", "Kubernetes release of the control plane, v1.MINOR or v1.MINOR.PATCH: v1.37 (the default) or v1.34 (the oldest supported); built from source on first use")
	up.Flags().StringVar(&o.IMEXMode, "imex-mode", "driverManaged", "Who runs IMEX: driverManaged (a daemon per ComputeDomain) or hostManaged (each node with a fabric runs a simulated nvidia-imex host service for its rack; the planes are installed in host-managed mode)")

	var downDir string
	down := &cobra.Command{
		Use:     "down",
		Short:   "Stop everything `sim up` started and remove its state",
		Example: "  cdplane sim down",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := sim.Load(downDir)
			if err != nil {
				return err
			}
			if st == nil {
				if _, err := os.Stat(downDir); err == nil {
					return fmt.Errorf("%s holds no simulated cluster's state; not removing it", downDir)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "No simulated cluster in %s\n", downDir)
				return nil
			}
			return sim.Down(st, downDir, cmd.OutOrStdout())
		},
	}
	down.Flags().StringVar(&downDir, "state-dir", sim.DefaultStateDir(), "The sim's state directory")

	var jobDir, jobPlot string
	var jo sim.JobOptions
	job := &cobra.Command{
		Use:   "job",
		Short: "Run a ComputeDomain job across the sim's nodes and report time to Ready and peak memory",
		Example: `  cdplane sim job
  cdplane sim job --nodes 18 --keep
  cdplane sim job --plot /tmp/job.svg`,
		Long: `Creates a ComputeDomain with numNodes --nodes and an Indexed Job of --nodes pods (one per
node, each claiming the domain's channel, as in the README sample) on the running sim, waits with
progress for the domain to be Ready and every pod Running, prints both times, where the time
went (from the API's timestamps: pods created, scheduled, started, daemons registered and Ready,
the domain's Ready condition; median, p99 and max over the pods) and the peak resident memory
(VmHWM) of every process of the sim, then deletes the job unless --keep.
With --plot FILE.svg it also draws the nodes Ready in the domain and the pods Running, sampled
every second, over the seconds since the apply (on failure too: it shows where it stalled).
This is the scale smoke: cdplane sim up --nodes 1152 && cdplane sim job.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if jobPlot != "" {
				if err := plot.CheckPath(jobPlot); err != nil {
					return fmt.Errorf("--plot: %w", err)
				}
			}
			st, err := sim.Load(jobDir)
			if err != nil {
				return err
			}
			if st == nil {
				return fmt.Errorf("no simulated cluster in %s: start one with cdplane sim up", jobDir)
			}
			out := cmd.OutOrStdout()
			jo.Out = out
			res, jobErr := sim.RunJob(cmd.Context(), st, jo)
			var plotErr error
			if jobPlot != "" && res != nil {
				if plotErr = plot.WriteFile(jobPlot, res.Chart()); plotErr == nil {
					fmt.Fprintf(out, "Wrote the plot of nodes Ready and pods Running to %s\n", jobPlot)
				}
			}
			if jobErr == nil {
				runner := "processes"
				if st.InProcess {
					runner = "in-process"
				}
				fmt.Fprintf(out, "\nA %d-node ComputeDomain job on a %d-node sim (%d channels per node, pods %s):\n", res.Nodes, len(st.Nodes), st.NumChannels, runner)
				fmt.Fprintf(out, "  domain Ready after      %s\n  every pod Running after %s\n", res.Ready.Round(100*time.Millisecond), res.Running.Round(100*time.Millisecond))
				if !st.InProcess {
					fmt.Fprintf(out, "  simulated IMEX DNS lookups: not counted (daemons run as processes; see each IMEX's status)\n")
				} else if n, err := sim.IMEXDNSLookups(jobDir); err == nil {
					// Cluster DNS queries real IMEX daemons would have sent for names their
					// hosts file does not map; the product maps every name, so 0.
					fmt.Fprintf(out, "  simulated IMEX DNS lookups since sim up: %d\n", n)
				}
			}
			// The breakdown and the memory table come on failure too: they are what one looks
			// at first.
			if res != nil && res.Breakdown != nil {
				fmt.Fprintln(out)
				res.Breakdown.Write(out)
			}
			mem, err := sim.PeakMemory(st)
			if err != nil {
				return errors.Join(jobErr, plotErr, err)
			}
			fmt.Fprintf(out, "\nPeak resident memory (VmHWM) of the sim's processes:\n  %-26s %6s %12s %12s\n", "PROCESS", "COUNT", "MAX", "SUM")
			for _, m := range mem {
				fmt.Fprintf(out, "  %-26s %6d %9.0f MiB %9.0f MiB\n", m.Name, m.Count, float64(m.MaxPeak)/(1<<20), float64(m.SumPeak)/(1<<20))
			}
			return errors.Join(jobErr, plotErr)
		},
	}
	job.Flags().IntVar(&jo.Nodes, "nodes", 0, "Nodes the job spans, one pod each (default: every node of the sim's first plane)")
	job.Flags().StringVar(&jo.Name, "name", "", `Name of the ComputeDomain and the Job (default "job-<nodes>")`)
	job.Flags().StringVar(&jo.Namespace, "namespace", "", `Their namespace (default: "<plane>-workloads", or "default" on the legacy plane)`)
	job.Flags().BoolVar(&jo.Keep, "keep", false, "Leave the job and the domain in place")
	job.Flags().DurationVar(&jo.Timeout, "timeout", 30*time.Minute, "How long to wait")
	job.Flags().StringVar(&jobDir, "state-dir", sim.DefaultStateDir(), "The sim's state directory")
	job.Flags().StringVar(&jobPlot, "plot", "", "Write an SVG chart of the nodes Ready in the domain and the pods Running over time to this file (.svg)")

	var kubeletDir string
	var shard, shards int
	kubeletCmd := &cobra.Command{
		Use:    "kubelet",
		Short:  "The simulated kubelet of a sim (started by sim up)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := klog.NewContext(cmd.Context(), klog.Background())
			return sim.RunKubelet(ctx, kubeletDir, shard, shards)
		},
	}
	kubeletCmd.Flags().StringVar(&kubeletDir, "state-dir", sim.DefaultStateDir(), "The sim's state directory")
	kubeletCmd.Flags().IntVar(&shard, "shard", 0, "Which share of the nodes this process serves")
	kubeletCmd.Flags().IntVar(&shards, "shards", 1, "How many processes share the nodes")
	cmd.AddCommand(up, down, job, kubeletCmd, newSimLoadImageCommand(), newSimPreviousReleaseCommand())
	return cmd
}

// loadedSim returns the running sim of dir, or an error saying to start one.
func loadedSim(dir string) (*sim.State, error) {
	st, err := sim.Load(dir)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return nil, fmt.Errorf("no simulated cluster in %s: start one with cdplane sim up", dir)
	}
	return st, nil
}

func newSimLoadImageCommand() *cobra.Command {
	var dir, from string
	cmd := &cobra.Command{
		Use:   "load-image IMAGE --from DIR",
		Short: "Make the simulated nodes run DIR's binaries for IMAGE, as kind load puts an image on its nodes",
		Long: `Copies the binaries in DIR (what the sim builds for its own image: cdplane, cdplane-controller,
cdplane-daemon and the simulated node's cdplane-kubelet-plugin) into the sim as IMAGE
(repository[:tag], "latest" without a tag). From then on every container of that image starts
those binaries, whatever other tag of the repository runs beside it: an upgrade between two
versions runs both at once. Loading an image again replaces it. A container of an image neither
loaded nor the sim's own runs a stand-in that only records what it was given.`,
		Example: `  cdplane sim load-image registry.example.com/cdplane:0.2.0 --from /tmp/cdplane-0.2.0-sim/
  cdplane apply plane --control-plane-id plane-a --set image.repository=registry.example.com/cdplane --set image.tag=0.2.0`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if from == "" {
				return usage(errors.New("--from DIR: the directory of the image's binaries"))
			}
			st, err := loadedSim(dir)
			if err != nil {
				return err
			}
			if err := st.LoadImage(args[0], from); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Loaded %s from %s\n", args[0], from)
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "Directory of the image's binaries")
	cmd.Flags().StringVar(&dir, "state-dir", sim.DefaultStateDir(), "The sim's state directory")
	return cmd
}

func newSimPreviousReleaseCommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "previous-release",
		Short: "Build the previous release from git history and load its image, to try an upgrade",
		Long: `Builds the release recorded in hack/releases/previous from the repository's history (its CLI, and
its image's binaries as the sim runs them; cached by commit), loads the image into the sim as
cdplane:<version>, and prints the release's CLI. With it, go back to that release and up again
as docs/upgrading.md says; the end-to-end suite does the same (TestUpgradeFromThePreviousReleaseAndBack).`,
		Example: `  cdplane sim previous-release                      # its last line is the release's CLI
  cdplane sim previous-release --state-dir /tmp/my-sim`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := loadedSim(dir)
			if err != nil {
				return err
			}
			r, err := sim.PreviousRelease(st.Repo)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			bin, err := sim.BuildRelease(cmd.Context(), st.Repo, r, out)
			if err != nil {
				return err
			}
			image := "cdplane:" + r.Version
			if err := st.LoadImage(image, bin); err != nil {
				return err
			}
			fmt.Fprintf(out, "Loaded %s into the sim: a plane runs it with --set image.tag=%s.\nRelease %s's CLI (it carries that release's charts):\n%s\n",
				image, r.Version, r.Version, filepath.Join(bin, "cdplane"))
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "state-dir", sim.DefaultStateDir(), "The sim's state directory")
	return cmd
}
