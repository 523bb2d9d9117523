package lifecycle

import (
	"io"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeconfigGetter selects a cluster by kubeconfig file and context, as the --kubeconfig and
// --context flags do (empty: $KUBECONFIG, ~/.kube/config, or in-cluster; the file's current
// context). It is for callers that hold a kubeconfig path rather than the CLI's flags.
func KubeconfigGetter(path, context string) genericclioptions.RESTClientGetter {
	flags := genericclioptions.NewConfigFlags(true)
	flags.KubeConfig = &path
	flags.Context = &context
	return flags
}

// clusterGetter is what the Manager and Helm reach the cluster through: the caller's getter
// (its flags: kubeconfig, context, impersonation, ...) with the Manager's client settings
// applied to every config it hands out, discovery included, so that Helm's requests are
// retried like the Manager's own.
type clusterGetter struct {
	base genericclioptions.RESTClientGetter
	out  io.Writer
	// timeout bounds the retries of each request (WithRetries).
	timeout time.Duration

	once      sync.Once
	cfg       *rest.Config
	discovery discovery.CachedDiscoveryInterface
	err       error
}

func newClusterGetter(base genericclioptions.RESTClientGetter, out io.Writer, timeout time.Duration) *clusterGetter {
	return &clusterGetter{base: base, out: out, timeout: timeout}
}

// load builds the config and the discovery client once: every Helm action of a command shares
// them, so the API groups are discovered once per command, not once per action.
func (g *clusterGetter) load() {
	g.once.Do(func() {
		cfg, err := g.base.ToRESTConfig()
		if err != nil {
			g.err = err
			return
		}
		cfg = WithCommandRates(rest.CopyConfig(cfg))
		g.cfg = WithRetries(cfg, g.out, g.timeout)
		dc, err := discovery.NewDiscoveryClientForConfig(g.cfg)
		if err != nil {
			g.err = err
			return
		}
		g.discovery = memory.NewMemCacheClient(dc)
	})
}

// ToRESTConfig returns a copy: Helm's clients set their own content types on it.
func (g *clusterGetter) ToRESTConfig() (*rest.Config, error) {
	g.load()
	if g.err != nil {
		return nil, g.err
	}
	return rest.CopyConfig(g.cfg), nil
}

func (g *clusterGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	g.load()
	return g.discovery, g.err
}

func (g *clusterGetter) ToRESTMapper() (meta.RESTMapper, error) {
	dc, err := g.ToDiscoveryClient()
	if err != nil {
		return nil, err
	}
	return restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(dc), dc, nil), nil
}

func (g *clusterGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return g.base.ToRawKubeConfigLoader()
}

// inNamespace is a getter whose default namespace is namespace: Helm acts on a release's
// objects in the namespace its getter names.
func (g *clusterGetter) inNamespace(namespace string) genericclioptions.RESTClientGetter {
	return namespacedGetter{clusterGetter: g, namespace: namespace}
}

type namespacedGetter struct {
	*clusterGetter
	namespace string
}

func (g namespacedGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return namespacedConfig{loader: g.clusterGetter.ToRawKubeConfigLoader(), namespace: g.namespace}
}

// namespacedConfig overrides the kubeconfig's namespace; an empty one leaves the kubeconfig's.
type namespacedConfig struct {
	loader    clientcmd.ClientConfig
	namespace string
}

func (c namespacedConfig) RawConfig() (clientcmdapi.Config, error) { return c.loader.RawConfig() }
func (c namespacedConfig) ClientConfig() (*rest.Config, error)     { return c.loader.ClientConfig() }
func (c namespacedConfig) ConfigAccess() clientcmd.ConfigAccess    { return c.loader.ConfigAccess() }

func (c namespacedConfig) Namespace() (string, bool, error) {
	if c.namespace == "" {
		return c.loader.Namespace()
	}
	return c.namespace, true, nil
}
