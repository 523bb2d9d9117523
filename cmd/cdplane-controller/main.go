// Command cdplane-controller reconciles ComputeDomains: it creates their claim templates and
// daemon DaemonSets, is the only writer of their membership (cliques and status) and cleans up
// after them.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"cdplane/internal/controller"
	"cdplane/internal/features"
	"cdplane/internal/flags"
	"cdplane/internal/plane"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "cdplane-controller:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	var o controller.Options
	fs := pflag.NewFlagSet("cdplane-controller", pflag.ContinueOnError)
	kube := flags.AddKubeClient(fs, 200, 400)
	fs.StringVar(&o.DriverNamespace, "namespace", os.Getenv("POD_NAMESPACE"), "Driver namespace: daemon DaemonSets, daemon claim templates, cliques and the leader-election lease (env POD_NAMESPACE)")
	fs.StringVar(&o.DaemonImage, "daemon-image", os.Getenv("DAEMON_IMAGE"), "Image of the compute-domain daemon pods (env DAEMON_IMAGE)")
	fs.StringVar(&o.DaemonBinary, "daemon-binary", "cdplane-daemon", "Path of the daemon binary inside the daemon image")
	fs.StringVar(&o.DaemonServiceAccount, "daemon-service-account", "cdplane-daemon", "Service account of the daemon pods")
	fs.StringVar(&o.DaemonPriorityClass, "daemon-priority-class", "", "Priority class of the daemon pods")
	fs.IntVar(&o.DaemonLogVerbosity, "daemon-log-verbosity", 1, "Log verbosity of the daemons")
	fs.IntVar(&o.MaxNodesPerIMEXDomain, "max-nodes-per-imex-domain", 18, "Most nodes in one clique: IMEX indexes are 0..N-1")
	fs.DurationVar(&o.BatchWindow, "batch-window", 0, "How long events for one ComputeDomain are collected before one reconcile (default 200ms)")
	fs.IntVar(&o.Workers, "workers", 8, "ComputeDomains reconciled concurrently")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", `Metrics endpoint address ("0" disables)`)
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", `Health probe address ("0" disables)`)
	fs.BoolVar(&o.LeaderElection, "leader-elect", true, "Elect a leader among replicas")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", 0, "How long a lease is valid without renewal (default 15s)")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", 0, "How long the leader retries renewing before giving up the leadership (default 10s); raise it with the lease duration on a loaded apiserver")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", 0, "How long between tries to acquire or renew the lease (default 2s)")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", "", `Name of the leader-election lease (default "cdplane-controller", prefixed with the control-plane id)`)
	plane.AddFlag(fs, &o.ControlPlaneID)
	mirrorSelector := fs.String("secret-mirror-selector", "", "Label selector of the Secrets to mirror from --secret-mirror-source-namespace into the plane's namespaces (empty: no mirroring)")
	fs.StringVar(&o.SecretMirror.SourceNamespace, "secret-mirror-source-namespace", "", "Namespace holding the Secrets to mirror (default: the driver namespace)")
	fs.DurationVar(&o.SecretMirror.ResyncInterval, "secret-mirror-resync-interval", 0, "How often every mirrored Secret is checked again, healing copies deleted or changed by others (default 10m)")
	mirrorNamespaces := fs.String("secret-mirror-namespace-selector", "", "Legacy plane only: label selector of the namespaces Secrets are mirrored into (empty: none)")
	fs.DurationVar(&o.CleanupInterval, "cleanup-interval", 0, "How often to look for objects of deleted ComputeDomains (default 10m)")
	logCfg := logsapi.NewLoggingConfiguration()
	logsapi.AddFlags(logCfg, fs)
	features.Gates.AddFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := plane.ValidateID(o.ControlPlaneID); err != nil {
		return err
	}
	if err := features.Validate(features.Gates); err != nil {
		return err
	}
	if err := logsapi.ValidateAndApply(logCfg, features.Gates); err != nil {
		return fmt.Errorf("logging flags: %w", err)
	}
	defer logs.FlushLogs()
	ctrl.SetLogger(klog.Background())
	if *mirrorSelector != "" {
		sel, err := labels.Parse(*mirrorSelector)
		if err != nil {
			return fmt.Errorf("--secret-mirror-selector: %w", err)
		}
		o.SecretMirror.SecretSelector = sel
	}
	if *mirrorNamespaces != "" {
		if o.ControlPlaneID != "" {
			return fmt.Errorf("--secret-mirror-namespace-selector is for the legacy plane only: a plane with an id mirrors into the namespaces assigned to it")
		}
		sel, err := labels.Parse(*mirrorNamespaces)
		if err != nil {
			return fmt.Errorf("--secret-mirror-namespace-selector: %w", err)
		}
		o.SecretMirror.LegacyNamespaceSelector = sel
	}
	o.DaemonFeatureGates = features.DaemonGates(features.Gates)
	o.Defaults()
	if err := o.Validate(); err != nil {
		return err
	}

	cfg, err := kube.Config()
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	mgr, err := controller.NewManager(ctx, cfg, o)
	if err != nil {
		return err
	}
	klog.Background().Info("Starting cdplane-controller", "namespace", o.DriverNamespace,
		"maxNodesPerIMEXDomain", o.MaxNodesPerIMEXDomain)
	return mgr.Start(ctx)
}
