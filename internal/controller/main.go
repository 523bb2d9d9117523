package controller

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/component"
	"cdplane/internal/controller/domainlabel"
	"cdplane/internal/features"
	"cdplane/internal/plane"
	"cdplane/internal/version"
)

// CommandOptions are the controller's command line: the manager's Options and how to reach the
// apiserver and log.
type CommandOptions struct {
	Options
	component.Common
	// SecretMirrorSelector and SecretMirrorNamespaceSelector are label selectors, parsed by
	// Validate into Options.SecretMirror.
	SecretMirrorSelector, SecretMirrorNamespaceSelector string
}

// NewCommandOptions returns the defaults, the driver namespace and daemon image from the
// environment.
func NewCommandOptions(inv component.Invocation) *CommandOptions {
	o := &CommandOptions{Common: component.NewCommon(component.KubeClient{QPS: 200, Burst: 400}, features.NewGates())}
	o.Gates = o.FeatureGates
	o.DriverNamespace = inv.Getenv("POD_NAMESPACE")
	o.DaemonImage = inv.Getenv("DAEMON_IMAGE")
	o.LeaderElectionIdentity = inv.Getenv("POD_NAME")
	o.DaemonBinary = "cdplane-daemon"
	o.DaemonServiceAccount = "cdplane-daemon"
	o.DaemonLogVerbosity = 1
	o.DaemonUpdateStrategy = appsv1.OnDeleteDaemonSetStrategyType
	o.MaxNodesPerIMEXDomain = cdv1beta1.DefaultMaxNodesPerIMEXDomain
	o.Workers = 8
	o.MetricsAddr, o.ProbeAddr = ":8080", ":8081"
	o.LeaderElection = true
	return o
}

// AddFlags registers the controller's flags.
func (o *CommandOptions) AddFlags(fs *pflag.FlagSet) {
	o.Common.AddFlags(fs)
	fs.StringVar(&o.DriverNamespace, "namespace", o.DriverNamespace, "Driver namespace: daemon DaemonSets, daemon claim templates, cliques and the leader-election lease (env POD_NAMESPACE)")
	fs.StringVar(&o.DaemonImage, "daemon-image", o.DaemonImage, "Image of the compute-domain daemon pods (env DAEMON_IMAGE)")
	fs.StringVar(&o.DaemonBinary, "daemon-binary", o.DaemonBinary, "Path of the daemon binary inside the daemon image")
	fs.StringVar(&o.DaemonServiceAccount, "daemon-service-account", o.DaemonServiceAccount, "Service account of the daemon pods")
	fs.StringVar(&o.DaemonPriorityClass, "daemon-priority-class", o.DaemonPriorityClass, "Priority class of the daemon pods")
	fs.IntVar(&o.DaemonLogVerbosity, "daemon-log-verbosity", o.DaemonLogVerbosity, "Log verbosity of the daemons")
	fs.Int32Var(&o.DaemonMetricsPort, "daemon-metrics-port", o.DaemonMetricsPort, `Port of the daemons' Prometheus metrics endpoint on their pod's IP (their --metrics-bind-address=$(POD_IP):<port>, container port "metrics"); 0: off. A change reaches live domains' daemons by --daemon-update-strategy`)
	fs.StringVar((*string)(&o.DaemonUpdateStrategy), "daemon-update-strategy", string(o.DaemonUpdateStrategy), "How a changed daemon template (new image, arguments, feature gates) reaches the daemons of live ComputeDomains: OnDelete (a daemon is replaced only when its pod goes: its node's workload ends, a drain, a pod deletion) or RollingUpdate (the daemons of each domain are replaced one node at a time, restarting IMEX under running jobs)")
	fs.StringVar((*string)(&o.IMEXMode), "imex-mode", string(o.IMEXMode), "Who runs IMEX on the plane's nodes: driverManaged (a daemon DaemonSet per ComputeDomain; the default) or hostManaged (the administrator's nvidia-imex host service; needs the HostManagedIMEXDaemon gate)")
	fs.StringVar(&o.TakeOverFrom, "take-over-from", o.TakeOverFrom, "Driver namespace of NVIDIA's DRA driver, whose ComputeDomains this plane takes over: what its controller and daemons created for a domain is removed when the domain is first reconciled (see docs/migrating.md); empty: none")
	fs.IntVar(&o.MaxNodesPerIMEXDomain, "max-nodes-per-imex-domain", o.MaxNodesPerIMEXDomain, "Most nodes in one clique: IMEX indexes are 0..N-1")
	fs.DurationVar(&o.BatchWindow, "batch-window", o.BatchWindow, "How long events for one ComputeDomain are collected before one reconcile (default 200ms)")
	fs.IntVar(&o.Workers, "workers", o.Workers, "ComputeDomains reconciled concurrently")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", o.MetricsAddr, `Metrics endpoint address ("0" disables)`)
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", o.ProbeAddr, `Health probe address ("0" disables)`)
	fs.BoolVar(&o.LeaderElection, "leader-elect", o.LeaderElection, "Elect a leader among replicas")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration, "How long a lease is valid without renewal (default 15s)")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", o.RenewDeadline, "How long the leader retries renewing before giving up the leadership (default 10s); raise it with the lease duration on a loaded apiserver")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", o.RetryPeriod, "How long between tries to acquire or renew the lease (default 2s)")
	fs.StringVar(&o.LeaderElectionIdentity, "leader-elect-identity", o.LeaderElectionIdentity, "This replica's name in the lease (env POD_NAME; default: the host name and a random suffix)")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", o.LeaderElectionID, `Name of the leader-election lease (default "cdplane-controller", prefixed with the control-plane id)`)
	plane.AddFlag(fs, &o.ControlPlaneID)
	fs.StringVar(&o.SecretMirrorSelector, "secret-mirror-selector", o.SecretMirrorSelector, "Label selector of the Secrets to mirror from --secret-mirror-source-namespace into the plane's namespaces (empty: no mirroring)")
	fs.StringVar(&o.SecretMirror.SourceNamespace, "secret-mirror-source-namespace", o.SecretMirror.SourceNamespace, "Namespace holding the Secrets to mirror (default: the driver namespace)")
	fs.DurationVar(&o.SecretMirror.ResyncInterval, "secret-mirror-resync-interval", o.SecretMirror.ResyncInterval, "How often every mirrored Secret is checked again, healing copies deleted or changed by others (default 10m)")
	fs.StringVar(&o.SecretMirrorNamespaceSelector, "secret-mirror-namespace-selector", o.SecretMirrorNamespaceSelector, "Legacy plane only: label selector of the namespaces Secrets are mirrored into (empty: none)")
	fs.StringVar((*string)(&o.LabelDomains), "label-domains", string(domainlabel.Auto), "Whether a plane with an id labels unlabelled ComputeDomains in its namespaces itself: auto (when the apiserver serves no MutatingAdmissionPolicy v1, before Kubernetes 1.36), true or false")
	fs.DurationVar(&o.CleanupInterval, "cleanup-interval", o.CleanupInterval, "How often to look for objects of deleted ComputeDomains (default 10m)")
}

// Validate reports the first invalid option and completes the options derived from flags.
func (o *CommandOptions) Validate() error {
	if err := plane.ValidateID(o.ControlPlaneID); err != nil {
		return err
	}
	if err := features.Validate(o.FeatureGates); err != nil {
		return err
	}
	if o.SecretMirrorSelector != "" {
		sel, err := labels.Parse(o.SecretMirrorSelector)
		if err != nil {
			return fmt.Errorf("--secret-mirror-selector: %w", err)
		}
		o.SecretMirror.SecretSelector = sel
	}
	if o.SecretMirrorNamespaceSelector != "" {
		if o.ControlPlaneID != "" {
			return fmt.Errorf("--secret-mirror-namespace-selector is for the legacy plane only: a plane with an id mirrors into the namespaces assigned to it")
		}
		sel, err := labels.Parse(o.SecretMirrorNamespaceSelector)
		if err != nil {
			return fmt.Errorf("--secret-mirror-namespace-selector: %w", err)
		}
		o.SecretMirror.LegacyNamespaceSelector = sel
	}
	if _, err := domainlabel.ParseMode(string(o.LabelDomains)); err != nil {
		return err
	}
	o.DaemonFeatureGates = features.DaemonGates(o.FeatureGates)
	o.Defaults()
	return o.Options.Validate()
}

// Run is `cdplane-controller [flags]`: it parses inv's arguments into fresh options and runs
// Main.
func Run(ctx context.Context, inv component.Invocation) error {
	o := NewCommandOptions(inv)
	if err := inv.Parse("cdplane-controller", o, inv.Args); err != nil {
		return err
	}
	return Main(ctx, inv, o)
}

// Main runs the controller manager until ctx ends.
func Main(ctx context.Context, inv component.Invocation, o *CommandOptions) error {
	if inv.OwnsProcess {
		flush, err := o.ApplyLogging()
		if err != nil {
			return err
		}
		defer flush()
	}
	cfg, err := inv.KubeConfig(&o.Kube)
	if err != nil {
		return err
	}
	// Version and the full effective configuration at verbosity 0, before anything can fail.
	klog.Background().Info("Starting cdplane-controller", "version", version.Version, "controlPlaneID", o.ControlPlaneID,
		"namespace", o.DriverNamespace, "flags", component.EffectiveFlags(o))
	mgr, err := NewManager(ctx, cfg, o.Options)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}
