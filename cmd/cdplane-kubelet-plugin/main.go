// Command cdplane-kubelet-plugin is the kubelet plugin of DRA driver compute-domain.nvidia.com:
// it publishes the node's IMEX channel and daemon devices, and prepares and unprepares claims
// for them through CDI.
package main

import (
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"cdplane/internal/app"
	_ "cdplane/internal/nvml/nvmlreal" // the real NVML backend
)

func main() {
	if err := app.KubeletPlugin(ctrl.SetupSignalHandler(), app.ProcessInvocation(os.Args[1:])); err != nil {
		fmt.Fprintln(os.Stderr, "cdplane-kubelet-plugin:", err)
		os.Exit(1)
	}
}
