package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"cdplane/internal/lifecycle"
	"cdplane/internal/scheme"
)

// kubeFlags are kubectl's flags that select a cluster and who talks to it (--kubeconfig,
// --context, --server, --as, --token, --request-timeout, ...), from cli-runtime, so that every
// command that talks to a cluster takes them as kubectl does. A command builds its clients from
// them only after it has checked its own flags and arguments.
type kubeFlags struct {
	*genericclioptions.ConfigFlags
	// names are the flags added, for given.
	names []string
}

// newKubeFlags returns the flags; namespaced adds -n/--namespace, only for a command that
// scopes what it does to a namespace (a flag it would ignore is not offered).
func newKubeFlags(namespaced bool) *kubeFlags {
	f := genericclioptions.NewConfigFlags(true)
	if !namespaced {
		f.Namespace = nil
	}
	// The discovery cache serves kubectl's resource lookups; these commands use typed clients
	// and never read it, so the flag would change nothing.
	f.CacheDir = nil
	return &kubeFlags{ConfigFlags: f}
}

// add registers the flags on cmd.
func (k *kubeFlags) add(cmd *cobra.Command) {
	fs := pflag.NewFlagSet("kube", pflag.ContinueOnError)
	k.AddFlags(fs)
	fs.VisitAll(func(f *pflag.Flag) { k.names = append(k.names, f.Name) })
	cmd.Flags().AddFlagSet(fs)
}

// given reports whether any of the flags was set on the command line: bench then uses that
// cluster instead of starting one.
func (k *kubeFlags) given(cmd *cobra.Command) bool {
	for _, n := range k.names {
		if cmd.Flags().Changed(n) {
			return true
		}
	}
	return false
}

// restConfig is the flags' config as it is (bench measures with it and sets its own rates).
func (k *kubeFlags) restConfig() (*rest.Config, error) {
	cfg, err := k.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	return rest.CopyConfig(cfg), nil
}

// retryingConfig is the config the commands that read and write a cluster use: the rates
// lifecycle uses, and requests that fail transiently retried within timeout, saying so on
// notices.
func (k *kubeFlags) retryingConfig(notices io.Writer, timeout time.Duration) (*rest.Config, error) {
	cfg, err := k.restConfig()
	if err != nil {
		return nil, err
	}
	lifecycle.WithCommandRates(cfg)
	return lifecycle.WithRetries(cfg, notices, timeout), nil
}

// client is a controller-runtime client on retryingConfig, with cdplane's scheme.
func (k *kubeFlags) client(notices io.Writer, timeout time.Duration) (client.Client, error) {
	cfg, err := k.retryingConfig(notices, timeout)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, fmt.Errorf("creating a client: %w", err)
	}
	return c, nil
}

// namespace is -n, or else the kubeconfig context's namespace ("default" when it names none),
// as kubectl picks it.
func (k *kubeFlags) namespace() (string, error) {
	ns, _, err := k.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("loading the kubeconfig: %w", err)
	}
	return ns, nil
}

// getter is what lifecycle reaches the cluster through.
func (k *kubeFlags) getter() genericclioptions.RESTClientGetter { return k.ConfigFlags }
