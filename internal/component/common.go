package component

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Common are the options the controller and the kubelet plugin share: how they reach the
// apiserver, how they log, and their feature gates.
type Common struct {
	Kube    KubeClient
	Logging *logsapi.LoggingConfiguration
	// FeatureGates is the mutable set behind a component's Options.Gates, set by --feature-gates.
	FeatureGates featuregate.MutableFeatureGate
}

// NewCommon returns Common with kube's client limits, the default logging configuration and
// gates.
func NewCommon(kube KubeClient, gates featuregate.MutableFeatureGate) Common {
	return Common{Kube: kube, Logging: logsapi.NewLoggingConfiguration(), FeatureGates: gates}
}

// AddFlags registers --kubeconfig, --kube-api-qps, --kube-api-burst, the logging flags and
// --feature-gates.
func (c *Common) AddFlags(fs *pflag.FlagSet) {
	c.Kube.AddFlags(fs)
	logsapi.AddFlags(c.Logging, fs)
	c.FeatureGates.AddFlag(fs)
}

// ApplyLogging applies the logging flags to the process (klog, and controller-runtime's logger)
// and returns the flush to defer: for a component that owns its process only, since the logging
// configuration is global.
func (c *Common) ApplyLogging() (flush func(), err error) {
	if err := logsapi.ValidateAndApply(c.Logging, c.FeatureGates); err != nil {
		return nil, fmt.Errorf("logging flags: %w", err)
	}
	ctrl.SetLogger(klog.Background())
	return logs.FlushLogs, nil
}
