// Command cdplane-daemon is the per-node ComputeDomain daemon: `run` labels its pod with its
// clique and supervises IMEX; `check` is the readiness probe. All of it lives in package daemon.
package main

import (
	"cdplane/internal/component"
	"cdplane/internal/daemon"
	_ "cdplane/internal/nvml/nvmlreal" // the real NVML backend
)

func main() {
	component.Exit("cdplane-daemon", daemon.Run(component.SignalContext(), component.OSInvocation(), daemon.Host{}))
}
