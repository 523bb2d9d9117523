package daemon

import (
	"context"
	goflag "flag"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"cdplane/internal/component"
	"cdplane/internal/daemonenv"
	"cdplane/internal/features"
	"cdplane/internal/imex"
	"cdplane/internal/nvml"
	"cdplane/internal/plane"
	"cdplane/internal/scheme"
	"cdplane/internal/version"
)

// Subcommands of cdplane-daemon.
const (
	CommandRun   = "run"
	CommandCheck = "check"
)

// DefaultMetricsBindAddress turns the metrics endpoint off: the binary run outside a daemon pod
// opens no port; the controller passes --metrics-bind-address to the pods it creates.
const DefaultMetricsBindAddress = "0"

// fabricRetryInterval spaces clique discovery attempts while the fabric registers.
const fabricRetryInterval = 5 * time.Second

// Options are the daemon's command line; its identity comes from the environment (daemonenv).
type Options struct {
	// Command is CommandRun or CommandCheck.
	Command string
	Kube    component.KubeClient
	// Gates are the daemon's feature gates (--feature-gates, else the FEATURE_GATES variable).
	Gates featuregate.MutableFeatureGate
	// NVMLLibrary is the NVML library for clique discovery when CLIQUE_ID is not set.
	NVMLLibrary string
	// IMEXBinary and IMEXCtlBinary run IMEX and its readiness query: the flags, else the
	// daemonenv variables the kubelet plugin sets, else found on PATH.
	IMEXBinary, IMEXCtlBinary string
	// MetricsBindAddress is the metrics endpoint's host:port ("0": off, the default; the
	// controller sets $(POD_IP):<port>). run only.
	MetricsBindAddress string
	// ControlPlaneID labels the daemon's metrics (control_plane_id; "" for the legacy plane).
	ControlPlaneID string
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{Kube: component.KubeClient{QPS: 5, Burst: 10}, Gates: features.NewGates(), MetricsBindAddress: DefaultMetricsBindAddress}
}

// AddFlags registers the flags of the daemon's subcommands.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Kube.AddFlags(fs)
	fs.StringVar(&o.NVMLLibrary, "nvml-library", "", "NVML library for clique discovery when "+daemonenv.CliqueID+" is not set (env "+daemonenv.NVMLLibrary+"; default "+nvml.DefaultLibraryPath+")")
	fs.StringVar(&o.IMEXBinary, "imex-binary", "nvidia-imex", "The IMEX daemon, looked up on PATH unless a path (env "+daemonenv.IMEXBinary+", set by the kubelet plugin)")
	fs.StringVar(&o.IMEXCtlBinary, "imex-ctl-binary", "nvidia-imex-ctl", "IMEX's control tool, for the readiness query, looked up on PATH unless a path (env "+daemonenv.IMEXCtlBinary+", set by the kubelet plugin)")
	fs.StringVar(&o.MetricsBindAddress, daemonenv.MetricsBindAddressFlag, o.MetricsBindAddress, `Prometheus metrics endpoint of run (host:port, e.g. "$(POD_IP):8082", as the controller sets it; "0" disables)`)
	fs.StringVar(&o.ControlPlaneID, daemonenv.ControlPlaneIDFlag, o.ControlPlaneID, "Control-plane id the daemon's metrics are labelled with (control_plane_id): empty for the legacy plane (env "+plane.EnvVar+")")
	o.Gates.AddFlag(fs)
}

// driverFilesFromEnv sets the driver files' options not given as flags from the variables the
// kubelet plugin sets where it mounted the host driver's files.
func (o *Options) driverFilesFromEnv(fs *pflag.FlagSet, getenv func(string) string) {
	for _, f := range []struct {
		flag, env string
		p         *string
	}{{"imex-binary", daemonenv.IMEXBinary, &o.IMEXBinary}, {"imex-ctl-binary", daemonenv.IMEXCtlBinary, &o.IMEXCtlBinary}, {"nvml-library", daemonenv.NVMLLibrary, &o.NVMLLibrary}} {
		if v := getenv(f.env); v != "" && !fs.Changed(f.flag) {
			*f.p = v
		}
	}
}

// Validate reports the first invalid option.
func (o *Options) Validate() error {
	if o.Command != CommandRun && o.Command != CommandCheck {
		return fmt.Errorf("usage: cdplane-daemon %s|%s [flags]", CommandRun, CommandCheck)
	}
	if o.IMEXBinary == "" || o.IMEXCtlBinary == "" {
		return fmt.Errorf("--imex-binary and --imex-ctl-binary must not be empty")
	}
	if err := plane.ValidateID(o.ControlPlaneID); err != nil {
		return err
	}
	if err := validateMetricsAddress(o.MetricsBindAddress); err != nil {
		return err
	}
	return features.Validate(o.Gates)
}

// Host is what the node provides the daemon; the zero value is a real GPU node.
type Host struct {
	// NewIMEX supervises IMEX; nil runs the IMEX binaries of the options (imex.NewReal).
	NewIMEX func(imex.Options) imex.Interface
	// Discoverer finds the node's clique when CLIQUE_ID is not set; nil: real NVML.
	Discoverer nvml.Discoverer
}

// Run is `cdplane-daemon run|check [flags]`: it parses inv's arguments into fresh options and
// runs Main. cmd/cdplane-daemon and in-process instances both call it.
func Run(ctx context.Context, inv component.Invocation, host Host) error {
	o := NewOptions()
	o.ControlPlaneID = inv.Getenv(plane.EnvVar)
	if len(inv.Args) > 0 {
		o.Command = inv.Args[0]
	}
	if o.Command == "--version" {
		return inv.PrintVersion("cdplane-daemon")
	}
	if o.Command != CommandRun && o.Command != CommandCheck {
		return o.Validate()
	}
	fs := inv.NewFlagSet("cdplane-daemon " + o.Command)
	o.AddFlags(fs)
	if err := fs.Parse(inv.Args[1:]); err != nil {
		return err
	}
	o.driverFilesFromEnv(fs, inv.Getenv)
	if v := inv.Getenv(daemonenv.FeatureGates); v != "" && !fs.Changed("feature-gates") {
		if err := o.Gates.Set(v); err != nil {
			return fmt.Errorf("%s: %w", daemonenv.FeatureGates, err)
		}
	}
	if o.Command == CommandRun {
		// The start line's flags; not for check, the readiness probe, run every few seconds.
		component.RecordFlags(o, fs)
	}
	if err := o.Validate(); err != nil {
		return err
	}
	return Main(ctx, inv, o, host)
}

// Main runs the daemon's subcommand: run labels the pod with its clique and supervises IMEX
// until ctx ends; check is the readiness probe.
func Main(ctx context.Context, inv component.Invocation, o *Options, host Host) error {
	started := time.Now()
	// Taken whether or not it is logged: an in-process instance's record would stay behind.
	flags := component.EffectiveFlags(o)
	// Until the verbosity is known (it comes with the identity), log at the default.
	log := klog.Background()
	if !inv.OwnsProcess {
		log = inv.Logger(0)
	}
	discover := func() (string, error) {
		d := host.Discoverer
		if d == nil {
			var err error
			if d, err = nvml.New(o.NVMLLibrary); err != nil {
				return "", err
			}
		}
		return DiscoverClique(ctx, d, o.Gates.Enabled(features.CrashOnNVLinkFabricErrors), fabricRetryInterval, log)
	}
	cfg, err := ConfigFromEnv(inv.LookupEnv, discover)
	if err != nil {
		return err
	}
	var namesNote string
	cfg.Cliques = o.Gates.Enabled(features.ComputeDomainCliques)
	cfg.DNSNames, namesNote, err = useDNSNames(o.Gates.Enabled(features.IMEXDaemonsWithDNSNames), cfg.DriverVersion)
	if err != nil && o.Command == CommandRun {
		return err
	}
	if inv.OwnsProcess {
		var klogFlags goflag.FlagSet
		klog.InitFlags(&klogFlags)
		if err := klogFlags.Set("v", strconv.Itoa(cfg.LogVerbosity)); err != nil {
			return err
		}
		log = klog.Background()
	} else {
		log = inv.Logger(cfg.LogVerbosity)
	}
	log = log.WithValues("node", cfg.NodeName, "computeDomain", cfg.CDNamespace+"/"+cfg.CDName)
	if inv.OwnsProcess {
		ctrl.SetLogger(log)
		log.Info("Starting cdplane-daemon", "version", version.Version, "command", o.Command, "cliqueID", cfg.CliqueID,
			"flags", flags, "logVerbosity", cfg.LogVerbosity, "driverVersion", cfg.DriverVersion, "dnsNames", cfg.DNSNames)
	}
	if namesNote != "" && o.Command == CommandRun {
		log.Info("IMEX naming: "+namesNote, "driverVersion", cfg.DriverVersion)
	}

	io := imex.Options{
		ConfigPath: cfg.IMEXConfigPath(), HostsPath: cfg.HostsPath, Log: log, Stdout: inv.Stdout, Stderr: inv.Stderr,
		Binary: o.IMEXBinary, CtlBinary: o.IMEXCtlBinary,
		// No grace timer of its own: a restart bounds the stop with its context, and the
		// pod's termination leaves the kill to the pod's grace period.
		StopGrace: -1,
	}
	var x imex.Interface
	if host.NewIMEX != nil {
		x = host.NewIMEX(io)
	} else {
		x = imex.NewReal(io)
	}
	if o.Command == CommandCheck {
		return Check(ctx, cfg, x)
	}
	restCfg, err := inv.KubeConfig(&o.Kube)
	if err != nil {
		return err
	}
	c, err := client.NewWithWatch(restCfg, client.Options{Scheme: scheme.Shared(), Mapper: inv.Mapper})
	if err != nil {
		return fmt.Errorf("creating the API client: %w", err)
	}
	m := NewMetrics(cfg, o.ControlPlaneID, started)
	if !metricsOff(o.MetricsBindAddress) {
		if inv.OwnsProcess {
			// Not for an in-process instance: they would describe the process it shares.
			m.Registry().MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		}
		ep, err := ListenMetrics(o.MetricsBindAddress, m.Registry())
		if err != nil {
			return err
		}
		defer ep.Close()
		log.Info("Serving metrics", "address", ep.Addr(), "path", MetricsPath)
	}
	return Serve(ctx, cfg, Deps{Client: c, IMEX: x, Log: log, Metrics: m})
}
