// Command cdplane-kubelet-plugin, as the simulated cluster's image carries it: the product's
// kubelet plugin (package kubeletplugin, unchanged) on a simulated node's host — the simulated
// driver's /proc files and device nodes as files (package nodehost) — reading NVML through the
// real backend, as on a GPU node: it loads the libnvidia-ml.so.1 of its driver root, which on a
// simulated node is the simulated NVML library (package nvmlsim).
package main

import (
	"cdplane/internal/component"
	_ "cdplane/internal/nvml/nvmlreal" // NVML through go-nvml, as cmd/cdplane-kubelet-plugin
	"cdplane/internal/sim/nodehost"
)

func main() {
	component.Exit("cdplane-kubelet-plugin", nodehost.RunPlugin(component.SignalContext(), component.OSInvocation()))
}
