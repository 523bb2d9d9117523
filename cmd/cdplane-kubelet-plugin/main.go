// Command cdplane-kubelet-plugin is the kubelet plugin of DRA driver compute-domain.nvidia.com:
// it publishes the node's IMEX channel and daemon devices, and prepares and unprepares claims
// for them through CDI. All of it lives in package kubeletplugin.
package main

import (
	"cdplane/internal/component"
	"cdplane/internal/kubeletplugin"
	_ "cdplane/internal/nvml/nvmlreal" // the real NVML backend
)

func main() {
	component.Exit("cdplane-kubelet-plugin", kubeletplugin.Run(component.SignalContext(), component.OSInvocation(), kubeletplugin.Host{}))
}
