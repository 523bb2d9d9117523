// Package cli implements the cdplane command line.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"cdplane/internal/refusal"
	"cdplane/internal/version"
)

// quietRuntimeLogs silences controller-runtime's logs once per process. The CLI runs
// controllers and clients in-process for benchmarks; their logs are not its output. Only once:
// controller-runtime's SetLogger is not safe to call from two goroutines (it reads its
// promise unlocked), and tests run commands from parallel tests.
var quietRuntimeLogs sync.Once

// Main runs the command line and returns the exit code: 0 done, 1 failed, 2 a usage error,
// 3 refused by a safety check (exitOK and the others). It may run on several goroutines at once.
func Main(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	ctx, stop := signalContext()
	defer stop()
	err := root.ExecuteContext(context.WithValue(ctx, argsKey{}, args))
	var code exitCode
	if errors.As(err, &code) {
		return int(code) // the child that did the work has said what went wrong
	}
	if err != nil {
		fmt.Fprintln(stderr, "cdplane:", err)
	}
	return exitCodeOf(err)
}

// newRoot builds the command tree, writing to stdout and stderr.
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "cdplane",
		Short: "Install, run and inspect cdplane: ComputeDomains (multi-node NVLink IMEX) on Kubernetes",
		Long: `cdplane runs NVIDIA ComputeDomains on Kubernetes: IMEX daemons started, wired and torn
down for the pods that claim an IMEX channel through DRA.

This CLI installs and upgrades its Helm releases (install, apply, destroy), assigns
namespaces and nodes to control planes (assign, unassign), shows what runs (status),
collects what support needs (debug bundle), runs a simulated GPU cluster (sim) and
measures (bench).`,
		Example: `  cdplane install prerequisites
  cdplane install plane --control-plane-id plane-a --set image.repository=registry.example/cdplane
  cdplane status -n team-a`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Version,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return usage(setVerbosity(verbosity(cmd)))
		},
	}
	addVerbosity(root)
	root.SetVersionTemplate(version.String("cdplane") + "\n")
	quietRuntimeLogs.Do(func() { ctrl.SetLogger(logr.Discard()) })
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newBenchCommand())
	root.AddCommand(newAssignCommand(), newUnassignCommand())
	root.AddCommand(newInstallCommand(), newApplyCommand(), newDestroyCommand())
	root.AddCommand(newSimCommand())
	root.AddCommand(newStatusCommand())
	root.AddCommand(newDebugCommand())
	root.AddCommand(newVersionCommand())
	root.Args = func(cmd *cobra.Command, args []string) error { return usage(unknownSubcommand(cmd, args)) }
	root.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	strictArgs(root)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usage(err) })
	flagNoticesTo(root, stderr)
	return root
}

// exitCodeOf is the exit code for what a command returned. A refusal wins over a usage error:
// a check that refused (the plane's own driver namespace given to assign) is one even when it
// needs no cluster to say so.
func exitCodeOf(err error) int {
	switch {
	case err == nil:
		return exitOK
	case refusal.Is(err):
		return exitRefused
	case isUsage(err):
		return exitUsage
	}
	return exitError
}

// flagNoticesTo sends what pflag prints while parsing (a deprecated flag's notice) to stderr:
// cobra would print it on the command's output, which is stdout here, inside -o json.
func flagNoticesTo(cmd *cobra.Command, stderr io.Writer) {
	cmd.Flags().SetOutput(stderr)
	for _, c := range cmd.Commands() {
		flagNoticesTo(c, stderr)
	}
}

// signalContext returns the context commands run in. The first SIGINT or SIGTERM ends it: a
// command stops what it started and says what it got. A second one takes the signal's default
// action and ends the process, so that a command whose clean-up hangs can still be stopped
// from the terminal.
func signalContext() (context.Context, context.CancelFunc) {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-signals:
			// The default action is back before anything sees the context end: a command
			// that reports the interrupt and is interrupted again ends.
			signal.Stop(signals)
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(signals)
		cancel()
	}
}

// strictArgs makes every command below the root refuse arguments it does not take, as usage
// errors (the argument checks of the commands themselves included). Cobra
// would print a group's help and exit 0 for `cdplane assign nmespace x`, so a typo would pass
// for success; a group now refuses the unknown subcommand, and without arguments still prints
// its help. A command that declares no argument rule takes no arguments, instead of ignoring
// them.
func strictArgs(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		switch {
		case c.HasSubCommands() && !c.Runnable():
			c.Args = unknownSubcommand
			c.SuggestionsMinimumDistance = 2 // cobra's default, set only where it suggests itself
			c.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
		case c.Args == nil:
			c.Args = cobra.NoArgs
		}
		check := c.Args
		c.Args = func(cmd *cobra.Command, args []string) error { return usage(check(cmd, args)) }
		strictArgs(c)
	}
}

// unknownSubcommand refuses any argument of a group command: it can only be a subcommand that
// does not exist.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return errors.New(msg)
}
