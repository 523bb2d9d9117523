// Package cli implements the cdplane command line.
package cli

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Main runs the command line and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	root := &cobra.Command{
		Use:           "cdplane",
		Short:         "ComputeDomains on Kubernetes: benchmarks, NVML discovery and tools",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// The CLI runs controllers and clients in-process for benchmarks; their logs are not its output.
	ctrl.SetLogger(logr.Discard())
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newBenchCommand())
	root.AddCommand(newAssignCommand(), newUnassignCommand())
	root.AddCommand(newInstallCommand(), newApplyCommand(), newDestroyCommand())
	root.AddCommand(newSimCommand())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "cdplane:", err)
		return 1
	}
	return 0
}
