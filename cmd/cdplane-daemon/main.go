// Command cdplane-daemon is the per-node ComputeDomain daemon. `run` labels its pod with its
// clique and supervises IMEX; `check` is the readiness probe; `imex-sim` runs the simulated IMEX.
package main

import (
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"cdplane/internal/app"
	"cdplane/internal/imex"
	_ "cdplane/internal/nvml/nvmlreal" // the real NVML backend
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "imex-sim" {
		os.Exit(imex.SimMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	if err := app.Daemon(ctrl.SetupSignalHandler(), app.ProcessInvocation(os.Args[1:])); err != nil {
		fmt.Fprintln(os.Stderr, "cdplane-daemon:", err)
		os.Exit(1)
	}
}
