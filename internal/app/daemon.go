package app

import (
	"context"
	goflag "flag"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"cdplane/internal/controller"
	"cdplane/internal/daemon"
	"cdplane/internal/features"
	"cdplane/internal/flags"
	"cdplane/internal/nvml"
)

// Daemon is `cdplane-daemon run|check`: run labels the pod with its clique and supervises IMEX
// until ctx ends; check is the readiness probe.
func Daemon(ctx context.Context, inv Invocation) error {
	args := inv.Args
	if len(args) == 0 || (args[0] != "run" && args[0] != "check") {
		return fmt.Errorf("usage: cdplane-daemon run|check [flags]")
	}
	cmd := args[0]
	gates := features.NewGates()
	fs := pflag.NewFlagSet("cdplane-daemon "+cmd, pflag.ContinueOnError)
	fs.SetOutput(inv.Stderr)
	kube := flags.AddKubeClient(fs, 5, 10)
	backend := fs.String("imex", inv.envOr("IMEX_BACKEND", daemon.IMEXReal), "IMEX backend: real, sim or sim-process (env IMEX_BACKEND)")
	nvmlBackend := fs.String("nvml", inv.envOr("NVML_BACKEND", nvml.BackendNVML), "Clique discovery when CLIQUE_ID is not set: nvml or sim (env NVML_BACKEND)")
	gates.AddFlag(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if v := inv.Getenv("FEATURE_GATES"); v != "" && !fs.Changed("feature-gates") {
		if err := gates.Set(v); err != nil {
			return fmt.Errorf("FEATURE_GATES: %w", err)
		}
	}
	if err := features.Validate(gates); err != nil {
		return err
	}
	// Until the verbosity is known (it comes with the identity), log at the default.
	log := klog.Background()
	if !inv.OwnsProcess {
		log = inv.instanceLogger(0)
	}
	discover := func() (string, error) {
		d, err := nvml.New(*nvmlBackend, nvml.Options{})
		if err != nil {
			return "", err
		}
		return daemon.DiscoverClique(ctx, d, gates.Enabled(features.CrashOnNVLinkFabricErrors), 5*time.Second, log)
	}
	cfg, err := daemon.ConfigFromEnv(inv.LookupEnv, discover)
	if err != nil {
		return err
	}
	cfg.DNSNames = gates.Enabled(features.IMEXDaemonsWithDNSNames)
	if inv.OwnsProcess {
		var klogFlags goflag.FlagSet
		klog.InitFlags(&klogFlags)
		if err := klogFlags.Set("v", strconv.Itoa(cfg.LogVerbosity)); err != nil {
			return err
		}
		log = klog.Background()
	} else {
		log = inv.instanceLogger(cfg.LogVerbosity)
	}
	log = log.WithValues("node", cfg.NodeName, "computeDomain", cfg.CDNamespace+"/"+cfg.CDName)
	if inv.OwnsProcess {
		ctrl.SetLogger(log)
	}

	x, err := daemon.NewIMEX(*backend, cfg, log, inv.Stdout, inv.Stderr)
	if err != nil {
		return err
	}
	if cmd == "check" {
		return daemon.Check(ctx, cfg, x)
	}
	restCfg, err := inv.kubeConfig(kube)
	if err != nil {
		return err
	}
	c, err := client.NewWithWatch(restCfg, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		return fmt.Errorf("creating the API client: %w", err)
	}
	return daemon.Run(ctx, cfg, daemon.Deps{Client: c, IMEX: x, Log: log})
}
