// Package flags holds command-line flags shared by cdplane's binaries.
package flags

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// KubeClient are the flags reaching the apiserver.
type KubeClient struct {
	Kubeconfig string
	QPS        float32
	Burst      int
}

// AddKubeClient registers --kubeconfig, --kube-api-qps and --kube-api-burst with the given
// defaults for client-side rate limiting.
func AddKubeClient(fs *pflag.FlagSet, qps float32, burst int) *KubeClient {
	k := &KubeClient{}
	fs.StringVar(&k.Kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty means in-cluster, then $KUBECONFIG")
	fs.Float32Var(&k.QPS, "kube-api-qps", qps, "Client-side limit of requests per second to the apiserver")
	fs.IntVar(&k.Burst, "kube-api-burst", burst, "Client-side burst of requests to the apiserver")
	return k
}

// Config returns the rest.Config the flags describe.
func (k *KubeClient) Config() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.Kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	if k.QPS <= 0 || k.Burst <= 0 {
		return nil, fmt.Errorf("--kube-api-qps and --kube-api-burst must be positive, got %v and %d", k.QPS, k.Burst)
	}
	cfg.QPS, cfg.Burst = k.QPS, k.Burst
	return cfg, nil
}
