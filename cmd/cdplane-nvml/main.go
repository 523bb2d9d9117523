// Command cdplane-nvml prints what NVML says about this node's GPUs and the NVLink clique they
// derive. It is its own binary, apart from the cdplane CLI, because the CLI embeds Helm's
// template engine, whose use of reflection keeps every go-nvml binding linked, and a binary
// that references every NVML symbol cannot start against an older driver library (or none).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"cdplane/internal/driverroot"
	"cdplane/internal/nvml"
	_ "cdplane/internal/nvml/nvmlreal" // the real NVML backend
	"cdplane/internal/version"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cdplane-nvml:", err)
		os.Exit(1)
	}
}

// run runs the command line, under a context that SIGINT and SIGTERM end.
func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{Use: "cdplane-nvml", Short: "NVML fabric discovery", SilenceUsage: true, SilenceErrors: true,
		Version: version.Version}
	root.SetVersionTemplate(version.String("cdplane-nvml") + "\n")
	root.AddCommand(newDiscoverCommand())
	return root.ExecuteContext(ctx)
}

func newDiscoverCommand() *cobra.Command {
	var library, root string
	discover := &cobra.Command{
		Use:   "discover",
		Short: "Print this node's GPUs, their raw NVLink fabric state and the clique they derive",
		Long: "Finds libnvidia-ml.so.1 under the driver root as the kubelet plugin does (the root's loader cache, then the\n" +
			"directories a driver install uses, links resolved inside the root), loads it by its full path, and prints what\n" +
			"the plugin would derive. --nvml-library loads a library by path instead.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if library == "" {
				r := driverroot.Root{Host: root, Container: root}
				p, l := r.FindNVML()
				if p == "" {
					return r.Miss(driverroot.NVMLLibrary, l, "")
				}
				library = p
			}
			fmt.Fprintf(cmd.OutOrStdout(), "NVML: %s\n", library)
			d, err := nvml.New(library)
			if err != nil {
				return err
			}
			res, derr := d.Discover(cmd.Context())
			fmt.Fprint(cmd.OutOrStdout(), nvml.Describe(res, derr))
			return derr
		},
	}
	discover.Flags().StringVar(&library, "nvml-library", "", "NVML library to load, by path (default: found under --driver-root)")
	discover.Flags().StringVar(&root, "driver-root", "/", "NVIDIA driver root to find libnvidia-ml.so.1 under (the chart's nvidiaDriverRoot)")
	return discover
}
