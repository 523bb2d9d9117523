package component

import (
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// KubeClient are the flags reaching the apiserver, shared by every component.
type KubeClient struct {
	Kubeconfig string
	QPS        float32
	Burst      int
}

// AddFlags registers --kubeconfig, --kube-api-qps and --kube-api-burst, with k's values as the
// defaults.
func (k *KubeClient) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&k.Kubeconfig, "kubeconfig", k.Kubeconfig, "Path to a kubeconfig; empty means in-cluster, then $KUBECONFIG")
	fs.Float32Var(&k.QPS, "kube-api-qps", k.QPS, "Client-side limit of requests per second to the apiserver")
	fs.IntVar(&k.Burst, "kube-api-burst", k.Burst, "Client-side burst of requests to the apiserver")
}

// Config returns the rest.Config the flags describe.
func (k *KubeClient) Config() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.Kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	return k.limit(cfg)
}

// ConfigFrom is Config for a program that does not own its process: the kubeconfig is
// --kubeconfig or else kubeconfigEnv (the program's own KUBECONFIG), never the process's
// environment or in-cluster files; and the client gets a connection of its own.
func (k *KubeClient) ConfigFrom(kubeconfigEnv string) (*rest.Config, error) {
	path := k.Kubeconfig
	if path == "" {
		if list := filepath.SplitList(kubeconfigEnv); len(list) > 0 {
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
	return k.limit(OwnConnection(cfg))
}

func (k *KubeClient) limit(cfg *rest.Config) (*rest.Config, error) {
	if k.QPS <= 0 || k.Burst <= 0 {
		return nil, fmt.Errorf("--kube-api-qps and --kube-api-burst must be positive, got %v and %d", k.QPS, k.Burst)
	}
	cfg.QPS, cfg.Burst = k.QPS, k.Burst
	return cfg, nil
}

// OwnConnection returns a copy of cfg whose clients get a connection of their own. client-go
// shares one HTTP/2 connection among the clients of equal configurations, and a watch stream
// its reader is slow to drain holds up every other stream on it by flow control; a config with
// a Dial of its own gets a transport of its own.
func OwnConnection(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	c.Dial = dialer.DialContext
	return c
}
