// Package app holds the entry points of cdplane's node programs — the kubelet plugin and the
// compute-domain daemon — so that each can run either as a process of its own (cmd/…) or as one
// of many instances in one process (the simulated kubelet's in-process runner). Everything an
// instance reads comes from its Invocation: arguments, environment, output and context; only an
// invocation that owns its process touches process-wide state (klog's flags, the
// controller-runtime logger).
package app

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
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

// kubeConfig returns the client configuration of the kube flags. An invocation that does not
// own its process reads KUBECONFIG from its own environment (no in-cluster fallback: that reads
// the process's) and gets a dialer of its own, which keeps client-go from sharing one cached
// connection among all instances.
func (inv Invocation) kubeConfig(k *flags.KubeClient) (*rest.Config, error) {
	if inv.OwnsProcess {
		return k.Config()
	}
	path := k.Kubeconfig
	if path == "" {
		if list := filepath.SplitList(inv.Getenv("KUBECONFIG")); len(list) > 0 {
			path = list[0]
		}
	}
	if path == "" {
		return nil, fmt.Errorf("no kubeconfig: set --kubeconfig or KUBECONFIG")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	if k.QPS <= 0 || k.Burst <= 0 {
		return nil, fmt.Errorf("--kube-api-qps and --kube-api-burst must be positive, got %v and %d", k.QPS, k.Burst)
	}
	cfg.QPS, cfg.Burst = k.QPS, k.Burst
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	cfg.Dial = dialer.DialContext
	return cfg, nil
}
