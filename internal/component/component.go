// Package component is the shape cdplane's three component binaries share: each component
// package (controller, daemon, kubeletplugin) has Options with AddFlags and Validate, and a
// Main that runs it; its Run parses an Invocation's arguments into fresh Options and calls Main.
// A cmd/<binary>/main.go is then the same three lines for every component:
//
//	func main() {
//		component.Exit("cdplane-daemon", daemon.Run(component.SignalContext(), component.OSInvocation(), daemon.Deps{}))
//	}
//
// An Invocation carries everything a run reads (arguments, environment, output), so that the
// same Run also serves as one of many instances in one process (the simulated kubelet's).
package component

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/textlogger"
	ctrl "sigs.k8s.io/controller-runtime"

	"cdplane/internal/version"
)

// Invocation is one run of a component.
type Invocation struct {
	// Args are the arguments after the program name.
	Args []string
	// LookupEnv reads the environment.
	LookupEnv func(string) (string, bool)
	// Stdout and Stderr receive the program's output; its log goes to Stderr.
	Stdout, Stderr io.Writer
	// OwnsProcess is true when the program runs alone in its process (cmd/…): it may then
	// configure klog and the controller-runtime logger, and its API client may share the
	// process's connections. False for in-process instances: each logs through a logger of its
	// own and opens its own connection to the apiserver, as a separate process would.
	OwnsProcess bool
	// Mapper, when set, is the REST mapper the instance's API clients use instead of running
	// discovery into one of their own: the simulated kubelet shares one between its in-process
	// instances (one per apiserver, built on the kubelet's own connection), which would each
	// hold a copy of the discovery data otherwise, most of an instance's heap. Nil for a program
	// that owns its process.
	Mapper meta.RESTMapper
}

// OSInvocation is the invocation of a program that owns its process.
func OSInvocation() Invocation {
	return Invocation{Args: os.Args[1:], LookupEnv: os.LookupEnv, Stdout: os.Stdout, Stderr: os.Stderr, OwnsProcess: true}
}

// Getenv returns an environment variable, empty when unset.
func (inv Invocation) Getenv(name string) string {
	if inv.LookupEnv == nil {
		return ""
	}
	v, _ := inv.LookupEnv(name)
	return v
}

// EnvOr returns an environment variable, or def when it is unset or empty.
func (inv Invocation) EnvOr(name, def string) string {
	if v := inv.Getenv(name); v != "" {
		return v
	}
	return def
}

// Logger is the logger of an in-process instance: klog's text format to its Stderr.
func (inv Invocation) Logger(verbosity int) logr.Logger {
	return textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(inv.Stderr), textlogger.Verbosity(verbosity)))
}

// KubeConfig returns the client configuration of the kube flags: the process's for an
// invocation that owns it; otherwise from the invocation's own KUBECONFIG, on a connection of
// its own, as a separate process would have (KubeClient.ConfigFrom).
func (inv Invocation) KubeConfig(k *KubeClient) (*rest.Config, error) {
	if inv.OwnsProcess {
		return k.Config()
	}
	return k.ConfigFrom(inv.Getenv("KUBECONFIG"))
}

// NewFlagSet returns a flag set that reports errors instead of exiting, writing to Stderr.
func (inv Invocation) NewFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(inv.Stderr)
	return fs
}

// Options are a component's command-line options.
type Options interface {
	AddFlags(fs *pflag.FlagSet)
	Validate() error
}

// ErrVersionPrinted is what Parse returns after --version printed the version: the run ends
// there, successfully (Exit ends the process with status 0).
var ErrVersionPrinted = errors.New("version printed")

// Parse registers o's flags and --version on a flag set named name, parses args into o and
// validates it: every flag is checked before anything touches a node or the cluster. With
// --version it prints the version line (version.String) to Stdout and returns
// ErrVersionPrinted, whatever else the arguments say.
func (inv Invocation) Parse(name string, o Options, args []string) error {
	fs := inv.NewFlagSet(name)
	o.AddFlags(fs)
	var printVersion bool
	fs.BoolVar(&printVersion, "version", false, "Print the version and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if printVersion {
		return inv.PrintVersion(name)
	}
	RecordFlags(o, fs)
	return o.Validate()
}

// PrintVersion writes name's version line to Stdout and returns ErrVersionPrinted, for a
// program that parses its own arguments.
func (inv Invocation) PrintVersion(name string) error {
	fmt.Fprintln(inv.Stdout, version.String(name))
	return ErrVersionPrinted
}

// SignalContext is cancelled on SIGTERM or SIGINT.
func SignalContext() context.Context { return ctrl.SetupSignalHandler() }

// Exit ends the process: status 0 for a nil error or ErrVersionPrinted, else the error on
// stderr and status 1.
func Exit(name string, err error) {
	if err != nil && !errors.Is(err, ErrVersionPrinted) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// effective holds, per options value, the flags Parse (or RecordFlags) saw, until
// EffectiveFlags takes them.
var effective sync.Map // Options (a pointer) -> map[string]string

// RecordFlags remembers every flag of fs with its value, for EffectiveFlags(o): call it once fs
// is parsed into o. Parse does.
func RecordFlags(o any, fs *pflag.FlagSet) {
	values := map[string]string{}
	fs.VisitAll(func(f *pflag.Flag) { values[f.Name] = f.Value.String() })
	effective.Store(o, values)
}

// EffectiveFlags returns (once) every flag of o with the value it had after parsing — from
// arguments, environment or defaults — name to value, or nil when o was not parsed (built in
// code). Components log it at verbosity 0 when they start (docs/operations.md, "Logs"). It
// reads what Parse recorded rather than registering o's flags again: registering a flag sets
// its variable to the flag's default, which would undo what was parsed.
func EffectiveFlags(o any) map[string]string {
	v, ok := effective.LoadAndDelete(o)
	if !ok {
		return nil
	}
	return v.(map[string]string)
}
