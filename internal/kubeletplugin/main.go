package kubeletplugin

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"cdplane/internal/component"
	"cdplane/internal/driverroot"
	"cdplane/internal/features"
	"cdplane/internal/kubeletplugin/devices"
	"cdplane/internal/nvml"
	"cdplane/internal/plane"
	"cdplane/internal/version"
)

// stopTimeout bounds how long the plugin's shutdown may take.
const stopTimeout = 30 * time.Second

// Environment variables that set the driver-root flags' defaults.
const (
	NvidiaDriverRootEnv    = "NVIDIA_DRIVER_ROOT"
	ContainerDriverRootEnv = "CONTAINER_DRIVER_ROOT"
)

// PodIPEnv is the plugin pod's IP (the chart sets it from status.podIP): the health service
// listens on it; without it, on every address.
const PodIPEnv = "POD_IP"

// Defaults of the endpoint flags: both off, as NVIDIA's plugin's --healthcheck-port is, so that
// the binary run outside the chart (tests, several plugins on one machine) opens no port; the
// chart turns both on.
const (
	DefaultHealthcheckPort    = -1
	DefaultMetricsBindAddress = "0"
)

// CommandOptions are the plugin's command line: the driver's Options and how to reach the
// apiserver, log, and load NVML.
type CommandOptions struct {
	Options
	component.Common
	NVMLLibrary string
	// HealthcheckPort is the port of the gRPC health service on PodIP (negative: off; 0: any
	// free port); MetricsBindAddress the metrics endpoint's host:port ("0": off). Validate
	// turns them into Options.HealthAddress and MetricsAddress.
	HealthcheckPort    int
	MetricsBindAddress string
	PodIP              string
}

// NewCommandOptions returns the defaults, node and namespace from the environment.
func NewCommandOptions(inv component.Invocation) *CommandOptions {
	o := &CommandOptions{
		Options: Options{
			NodeName: inv.Getenv("NODE_NAME"), DriverNamespace: inv.Getenv("POD_NAMESPACE"),
			PodName: inv.Getenv("POD_NAME"), PodUID: types.UID(inv.Getenv("POD_UID")),
			RegistrarDir: DefaultRegistrarDir, PluginDataDir: DefaultPluginDataDir, CDIRoot: DefaultCDIRoot,
			StateDir: DefaultPluginDataDir, ProcDevices: devices.DefaultProcDevices,
			IMEXMgmtCapability: devices.DefaultIMEXMgmtCapability, NumChannels: devices.DefaultNumChannels,
			CliqueRefreshPeriod: DefaultCliqueRefreshPeriod, ReadyWaitTimeout: DefaultReadyWaitTimeout,
			StaleSweepInterval: DefaultStaleSweepInterval,
		},
		Common: component.NewCommon(component.KubeClient{QPS: 5, Burst: 10}, features.NewGates()),

		HealthcheckPort: DefaultHealthcheckPort, MetricsBindAddress: DefaultMetricsBindAddress, PodIP: inv.Getenv(PodIPEnv),
	}
	o.NvidiaDriverRoot, o.ContainerDriverRoot, o.DevRoot = devices.DefaultNvidiaDriverRoot, inv.Getenv(ContainerDriverRootEnv), devices.DefaultDevRoot
	if v := inv.Getenv(NvidiaDriverRootEnv); v != "" {
		o.NvidiaDriverRoot = v
	}
	o.IMEXMode = features.IMEXMode(inv.Getenv(IMEXModeEnv))
	o.HostIMEXSocketPath = inv.EnvOr(HostIMEXSocketPathEnv, DefaultHostIMEXSocketPath)
	o.Gates = o.FeatureGates
	return o
}

// AddFlags registers the plugin's flags.
func (o *CommandOptions) AddFlags(fs *pflag.FlagSet) {
	o.Common.AddFlags(fs)
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "Name of the node this plugin serves (env NODE_NAME)")
	fs.StringVar(&o.DriverNamespace, "namespace", o.DriverNamespace, "Driver namespace: cliques and daemon claims (env POD_NAMESPACE)")
	fs.StringVar(&o.RegistrarDir, "plugin-registration-path", o.RegistrarDir, "The kubelet's plugin registry directory")
	fs.StringVar(&o.PluginDataDir, "plugin-data-path", o.PluginDataDir, "Directory of the DRA gRPC socket")
	fs.StringVar(&o.CDIRoot, "cdi-root", o.CDIRoot, "Directory the claims' CDI specs are written to")
	fs.StringVar(&o.StateDir, "state-dir", o.StateDir, "Directory of the checkpoint and the domains' IMEX config directories")
	fs.StringVar(&o.ProcDevices, "proc-devices", o.ProcDevices, "File listing character device major numbers")
	fs.StringVar(&o.IMEXMgmtCapability, "imex-mgmt-capability", o.IMEXMgmtCapability, "NVIDIA capability file of the IMEX management device")
	fs.StringVar(&o.NvidiaDriverRoot, "nvidia-driver-root", o.NvidiaDriverRoot, "Host path of the NVIDIA driver root whose nvidia-imex, nvidia-imex-ctl and libnvidia-ml.so.1 daemon containers get (env "+NvidiaDriverRootEnv+")")
	fs.StringVar(&o.DevRoot, "dev-root", o.DevRoot, "Where this plugin reads the host's /dev, for /dev/nvidiactl when the driver root holds no device nodes")
	fs.StringVar(&o.ContainerDriverRoot, "container-driver-root", o.ContainerDriverRoot, "Where this plugin reads the driver root, when it is mounted elsewhere than --nvidia-driver-root (env "+ContainerDriverRootEnv+"; default --nvidia-driver-root)")
	plane.AddFlag(fs, &o.ControlPlaneID)
	fs.IntVar(&o.NumChannels, "num-channels", o.NumChannels, "Channel devices to publish per node: channel-0 … channel-(N-1). The shipped channel DeviceClass allocates only channel-0; more are for DeviceClasses an administrator adds")
	fs.StringVar(&o.NVMLLibrary, "nvml-library", o.NVMLLibrary, "NVML library to load, by path (default: "+driverroot.NVMLLibrary+" found under the driver root, --container-driver-root)")
	fs.BoolVar(&o.CliqueNodeLabel, "node-clique-label", o.CliqueNodeLabel, "Keep the node's nvidia.com/gpu.clique label equal to its clique")
	fs.DurationVar(&o.CliqueRefreshPeriod, "clique-refresh-period", o.CliqueRefreshPeriod, "How often the node's clique is discovered again")
	fs.DurationVar(&o.StaleSweepInterval, "stale-sweep-interval", o.StaleSweepInterval, "How often claims the node holds whose ResourceClaim is gone, and CDI specs of claims it does not hold, are removed (negative: never)")
	fs.StringVar((*string)(&o.IMEXMode), "imex-mode", string(o.IMEXMode), "Who runs IMEX: driverManaged (a daemon per ComputeDomain; the default) or hostManaged (the administrator's nvidia-imex host service; needs the HostManagedIMEXDaemon gate) (env "+IMEXModeEnv+")")
	fs.StringVar(&o.HostIMEXSocketPath, "imex-host-socket-path", o.HostIMEXSocketPath, "hostManaged: the host nvidia-imex command socket below the driver root (its IMEX_CMD_UNIX_DOMAIN_PATH) (env "+HostIMEXSocketPathEnv+")")
	fs.DurationVar(&o.ReadyWaitTimeout, "prepare-wait-timeout", o.ReadyWaitTimeout, "How long one prepare call waits for the node's daemon to be Ready before returning a retryable error")
	fs.IntVar(&o.HealthcheckPort, "healthcheck-port", o.HealthcheckPort, "Port of the gRPC health service (grpc.health.v1, services \"\" and \"liveness\"), on the pod's IP (env "+PodIPEnv+"; every address without it): SERVING while the plugin's registration and DRA sockets answer. Negative: off; 0: any free port")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, `Prometheus metrics endpoint address (host:port, e.g. "$(POD_IP):8080"; "0" disables)`)
}

// Validate reports the first invalid option, before anything touches the node or the cluster.
func (o *CommandOptions) Validate() error {
	if err := features.Validate(o.Gates); err != nil {
		return err
	}
	if err := plane.ValidateID(o.ControlPlaneID); err != nil {
		return err
	}
	switch {
	case o.NodeName == "":
		return fmt.Errorf("--node-name (or NODE_NAME) is required")
	case o.DriverNamespace == "":
		return fmt.Errorf("--namespace (or POD_NAMESPACE) is required")
	case o.NumChannels < 1 || o.NumChannels > devices.MaxChannels:
		return fmt.Errorf("--num-channels %d: want 1 to %d", o.NumChannels, devices.MaxChannels)
	case !filepath.IsAbs(o.NvidiaDriverRoot):
		return fmt.Errorf("--nvidia-driver-root %q: want an absolute path", o.NvidiaDriverRoot)
	case o.ContainerDriverRoot != "" && !filepath.IsAbs(o.ContainerDriverRoot):
		return fmt.Errorf("--container-driver-root %q: want an absolute path", o.ContainerDriverRoot)
	case !filepath.IsAbs(o.HostIMEXSocketPath):
		return fmt.Errorf("--imex-host-socket-path %q: want an absolute path (below the driver root)", o.HostIMEXSocketPath)
	}
	if _, err := features.ParseIMEXMode(string(o.IMEXMode), o.Gates); err != nil {
		return err
	}
	return o.validateEndpoints()
}

// validateEndpoints checks the endpoint flags and sets Options.HealthAddress and MetricsAddress.
func (o *CommandOptions) validateEndpoints() error {
	o.HealthAddress, o.MetricsAddress = "", ""
	switch {
	case o.HealthcheckPort > 65535:
		return fmt.Errorf("--healthcheck-port %d: want a port up to 65535 (negative: off)", o.HealthcheckPort)
	case o.HealthcheckPort >= 0:
		o.HealthAddress = net.JoinHostPort(o.PodIP, strconv.Itoa(o.HealthcheckPort))
	}
	if o.MetricsBindAddress == "0" || o.MetricsBindAddress == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(o.MetricsBindAddress)
	if err != nil {
		return fmt.Errorf("--metrics-bind-address %q: want host:port or 0: %w", o.MetricsBindAddress, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("--metrics-bind-address %q: port %q is not a port number", o.MetricsBindAddress, port)
	}
	if o.HealthAddress != "" && o.HealthcheckPort != 0 && port == strconv.Itoa(o.HealthcheckPort) {
		return fmt.Errorf("--metrics-bind-address %q: port %s is --healthcheck-port's", o.MetricsBindAddress, port)
	}
	o.MetricsAddress = o.MetricsBindAddress
	return nil
}

// Host is what the node provides the plugin; the zero value is a real GPU node.
type Host struct {
	// Discoverer finds the node's clique; nil: real NVML (--nvml-library).
	Discoverer nvml.Discoverer
	// ReadHostFile: see Options.
	ReadHostFile func(path string) ([]byte, error)
}

// Run is `cdplane-kubelet-plugin [flags]`: it parses inv's arguments into fresh options and runs
// Main. cmd/cdplane-kubelet-plugin and in-process instances both call it. `cdplane-kubelet-plugin
// check-host-imex` is the readiness probe of host-managed mode (CheckHostIMEX).
func Run(ctx context.Context, inv component.Invocation, host Host) error {
	if len(inv.Args) > 0 && inv.Args[0] == CommandCheckHostIMEX {
		return CheckHostIMEX(ctx, inv)
	}
	o := NewCommandOptions(inv)
	if err := inv.Parse("cdplane-kubelet-plugin", o, inv.Args); err != nil {
		return err
	}
	return Main(ctx, inv, o, host)
}

// Main serves the node's devices until ctx ends.
func Main(ctx context.Context, inv component.Invocation, o *CommandOptions, host Host) error {
	logger := inv.Logger(int(o.Logging.Verbosity))
	// Taken whether or not it is logged: an in-process instance's record would stay behind.
	flags := component.EffectiveFlags(o)
	if inv.OwnsProcess {
		flush, err := o.ApplyLogging()
		if err != nil {
			return err
		}
		defer flush()
		logger = klog.Background()
		logger.Info("Starting cdplane-kubelet-plugin", "version", version.Version, "node", o.NodeName,
			"nvidiaDriverRoot", o.NvidiaDriverRoot, "containerDriverRoot", o.ContainerDriverRoot,
			"imexMode", o.IMEXMode, "hostIMEXSocketPath", o.HostIMEXSocketPath, "flags", flags)
	}
	o.Discoverer, o.ReadHostFile = host.Discoverer, host.ReadHostFile
	if o.Discoverer == nil {
		d, err := o.nvmlDiscoverer()
		if err != nil {
			return err
		}
		o.Discoverer = d
	}
	var err error
	if o.Config, err = inv.KubeConfig(&o.Kube); err != nil {
		return err
	}
	o.Mapper = inv.Mapper
	ctx = klog.NewContext(ctx, logger)
	d, err := Start(ctx, o.Options)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-d.Done():
	}
	stopped := make(chan struct{})
	go func() { d.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(stopTimeout):
		return fmt.Errorf("the plugin did not stop within %s", stopTimeout)
	}
	return d.Err()
}
