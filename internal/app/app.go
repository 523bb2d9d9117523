// Package app holds the entry points of cdplane's node programs — the kubelet plugin and the
// compute-domain daemon — so that each can run either as a process of its own (cmd/…) or as one
// of many instances in one process (the simulated kubelet's in-process runner). Everything an
// instance reads comes from its Invocation: arguments, environment, output and context; only an
// invocation that owns its process touches process-wide state (klog's flags, the
// controller-runtime logger).
package app

import (
	"io"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/textlogger"

	"cdplane/internal/flags"
)

// Invocation is one run of a program.
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
}

// ProcessInvocation is the invocation of a program that owns its process.
func ProcessInvocation(args []string) Invocation {
	return Invocation{Args: args, LookupEnv: os.LookupEnv, Stdout: os.Stdout, Stderr: os.Stderr, OwnsProcess: true}
}

// Getenv returns an environment variable, empty when unset.
func (inv Invocation) Getenv(name string) string {
	v, _ := inv.LookupEnv(name)
	return v
}

// envOr returns an environment variable, or def when it is unset or empty.
func (inv Invocation) envOr(name, def string) string {
	if v := inv.Getenv(name); v != "" {
		return v
	}
	return def
}

// instanceLogger is the logger of an in-process instance: klog's text format to its Stderr.
func (inv Invocation) instanceLogger(verbosity int) logr.Logger {
	return textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(inv.Stderr), textlogger.Verbosity(verbosity)))
}

// kubeConfig returns the client configuration of the kube flags: the process's for an
// invocation that owns it; otherwise from the invocation's own KUBECONFIG, on a connection of
// its own, as a separate process would have (flags.KubeClient.ConfigFrom).
func (inv Invocation) kubeConfig(k *flags.KubeClient) (*rest.Config, error) {
	if inv.OwnsProcess {
		return k.Config()
	}
	return k.ConfigFrom(inv.Getenv("KUBECONFIG"))
}
