// Command cdplane-daemon is the per-node ComputeDomain daemon. `run` labels its pod with its
// clique and supervises IMEX; `check` is the readiness probe; `imex-sim` runs the simulated IMEX.
package main

import (
	goflag "flag"
	"fmt"
	"os"
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
	"cdplane/internal/imex"
	"cdplane/internal/nvml"
	_ "cdplane/internal/nvml/nvmlreal" // the real NVML backend
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "imex-sim" {
		os.Exit(imex.SimMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "cdplane-daemon:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 || (args[0] != "run" && args[0] != "check") {
		return fmt.Errorf("usage: cdplane-daemon run|check [flags]")
	}
	cmd := args[0]
	fs := pflag.NewFlagSet("cdplane-daemon "+cmd, pflag.ContinueOnError)
	kube := flags.AddKubeClient(fs, 5, 10)
	backend := fs.String("imex", envOr("IMEX_BACKEND", daemon.IMEXReal), "IMEX backend: real, sim or sim-process (env IMEX_BACKEND)")
	nvmlBackend := fs.String("nvml", envOr("NVML_BACKEND", nvml.BackendNVML), "Clique discovery when CLIQUE_ID is not set: nvml or sim (env NVML_BACKEND)")
	features.Gates.AddFlag(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if v := os.Getenv("FEATURE_GATES"); v != "" && !fs.Changed("feature-gates") {
		if err := features.Gates.Set(v); err != nil {
			return fmt.Errorf("FEATURE_GATES: %w", err)
		}
	}
	if err := features.Validate(features.Gates); err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	discover := func() (string, error) {
		d, err := nvml.New(*nvmlBackend, nvml.Options{})
		if err != nil {
			return "", err
		}
		return daemon.DiscoverClique(ctx, d, features.Enabled(features.CrashOnNVLinkFabricErrors), 5*time.Second, klog.Background())
	}
	cfg, err := daemon.ConfigFromEnv(os.LookupEnv, discover)
	if err != nil {
		return err
	}
	cfg.DNSNames = features.Enabled(features.IMEXDaemonsWithDNSNames)
	var klogFlags goflag.FlagSet
	klog.InitFlags(&klogFlags)
	if err := klogFlags.Set("v", strconv.Itoa(cfg.LogVerbosity)); err != nil {
		return err
	}
	log := klog.Background().WithValues("node", cfg.NodeName, "computeDomain", cfg.CDNamespace+"/"+cfg.CDName)
	ctrl.SetLogger(log)

	x, err := daemon.NewIMEX(*backend, cfg, log)
	if err != nil {
		return err
	}
	if cmd == "check" {
		return daemon.Check(ctx, cfg, x)
	}
	restCfg, err := kube.Config()
	if err != nil {
		return err
	}
	c, err := client.NewWithWatch(restCfg, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		return fmt.Errorf("creating the API client: %w", err)
	}
	return daemon.Run(ctx, cfg, daemon.Deps{Client: c, IMEX: x, Log: log})
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
