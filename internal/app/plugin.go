package app

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"cdplane/internal/features"
	"cdplane/internal/flags"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/nvml"
	"cdplane/internal/plane"
)

// pluginStopTimeout bounds how long the plugin's shutdown may take.
const pluginStopTimeout = 30 * time.Second

// KubeletPlugin is `cdplane-kubelet-plugin`: it serves the node's devices until ctx ends.
func KubeletPlugin(ctx context.Context, inv Invocation) error {
	var o kubeletplugin.Options
	var nvmlBackend, simSpec, simSpecFile, nvmlLibrary string
	gates := features.NewGates()
	fs := pflag.NewFlagSet("cdplane-kubelet-plugin", pflag.ContinueOnError)
	fs.SetOutput(inv.Stderr)
	kube := flags.AddKubeClient(fs, 5, 10)
	fs.StringVar(&o.NodeName, "node-name", inv.Getenv("NODE_NAME"), "Name of the node this plugin serves (env NODE_NAME)")
	fs.StringVar(&o.DriverNamespace, "namespace", inv.Getenv("POD_NAMESPACE"), "Driver namespace: cliques and daemon claims (env POD_NAMESPACE)")
	fs.StringVar(&o.RegistrarDir, "plugin-registration-path", kubeletplugin.DefaultRegistrarDir, "The kubelet's plugin registry directory")
	fs.StringVar(&o.PluginDataDir, "plugin-data-path", kubeletplugin.DefaultPluginDataDir, "Directory of the DRA gRPC socket")
	fs.StringVar(&o.CDIRoot, "cdi-root", kubeletplugin.DefaultCDIRoot, "Directory the claims' CDI specs are written to")
	fs.StringVar(&o.DeviceRoot, "device-root", kubeletplugin.DefaultDeviceRoot, "Host directory standing for /dev, where IMEX channel device nodes live")
	fs.StringVar(&o.StateDir, "state-dir", kubeletplugin.DefaultPluginDataDir, "Directory of the checkpoint and the domains' IMEX config directories")
	fs.StringVar(&o.ProcDevices, "proc-devices", kubeletplugin.DefaultProcDevices, "File listing character device major numbers")
	fs.StringVar(&o.IMEXMgmtCapability, "imex-mgmt-capability", kubeletplugin.DefaultIMEXMgmtCapability, "NVIDIA capability file of the IMEX management device")
	plane.AddFlag(fs, &o.ControlPlaneID)
	fs.IntVar(&o.NumChannels, "num-channels", kubeletplugin.MaxChannels, "Number of channel devices to publish (fewer for large simulations)")
	fs.StringVar(&nvmlBackend, "nvml", nvml.BackendNVML, "Clique discovery backend: nvml, sim or auto")
	fs.StringVar(&nvmlLibrary, "nvml-library", "", "NVML library to load (default "+nvml.DefaultLibraryPath+")")
	fs.StringVar(&simSpec, "nvml-sim-spec", "", `Simulated node for --nvml=sim, as JSON: {"node":"n1","gpus":4,"fabric":{"clusterUUID":"…","cliqueID":1,"state":"COMPLETED"}}`)
	fs.StringVar(&simSpecFile, "nvml-sim-spec-file", "", "File holding the simulated node for --nvml=sim")
	fs.BoolVar(&o.CliqueNodeLabel, "node-clique-label", false, "Keep the node's nvidia.com/gpu.clique label equal to its clique")
	fs.DurationVar(&o.CliqueRefreshPeriod, "clique-refresh-period", kubeletplugin.DefaultCliqueRefreshPeriod, "How often the node's clique is discovered again")
	fs.DurationVar(&o.ReadyWaitTimeout, "prepare-wait-timeout", kubeletplugin.DefaultReadyWaitTimeout, "How long one prepare call waits for the node's daemon to be Ready before returning a retryable error")
	logCfg := logsapi.NewLoggingConfiguration()
	logsapi.AddFlags(logCfg, fs)
	gates.AddFlag(fs)
	if err := fs.Parse(inv.Args); err != nil {
		return err
	}
	if err := features.Validate(gates); err != nil {
		return err
	}
	if err := plane.ValidateID(o.ControlPlaneID); err != nil {
		return err
	}
	logger := inv.instanceLogger(int(logCfg.Verbosity))
	if inv.OwnsProcess {
		if err := logsapi.ValidateAndApply(logCfg, gates); err != nil {
			return fmt.Errorf("logging flags: %w", err)
		}
		defer logs.FlushLogs()
		logger = klog.Background()
		ctrl.SetLogger(logger)
	}

	disc, err := discoverer(nvmlBackend, nvmlLibrary, simSpec, simSpecFile)
	if err != nil {
		return err
	}
	o.Discoverer = disc
	o.SimulatedDevices = nvmlBackend == nvml.BackendSim
	o.Gates = gates
	if o.Config, err = inv.kubeConfig(kube); err != nil {
		return err
	}

	ctx = klog.NewContext(ctx, logger)
	d, err := kubeletplugin.Start(ctx, o)
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
	case <-time.After(pluginStopTimeout):
		return fmt.Errorf("the plugin did not stop within %s", pluginStopTimeout)
	}
	return d.Err()
}

func discoverer(backend, library, spec, specFile string) (nvml.Discoverer, error) {
	opts := nvml.Options{LibraryPath: library}
	if specFile != "" {
		data, err := os.ReadFile(specFile)
		if err != nil {
			return nil, fmt.Errorf("--nvml-sim-spec-file: %w", err)
		}
		spec = string(data)
	}
	if spec != "" {
		sim, err := nvml.ParseSim([]byte(spec))
		if err != nil {
			return nil, err
		}
		opts.Sim = &sim
	}
	return nvml.New(backend, opts)
}
