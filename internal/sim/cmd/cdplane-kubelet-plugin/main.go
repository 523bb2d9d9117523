// Command cdplane-kubelet-plugin, as the simulated cluster's image carries it: the product's
// kubelet plugin (package kubeletplugin, unchanged) on a simulated node's host — simulated NVML,
// the simulated driver's /proc files, device nodes as files (package nodehost).
package main

import (
	"cdplane/internal/component"
	"cdplane/internal/sim/nodehost"
)

func main() {
	component.Exit("cdplane-kubelet-plugin", nodehost.RunPlugin(component.SignalContext(), component.OSInvocation()))
}
