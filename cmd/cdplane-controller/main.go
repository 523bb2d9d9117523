// Command cdplane-controller reconciles ComputeDomains: it creates their claim templates and
// daemon DaemonSets, is the only writer of their membership (cliques and status) and cleans up
// after them. All of it lives in package controller.
package main

import (
	"cdplane/internal/component"
	"cdplane/internal/controller"
)

func main() {
	component.Exit("cdplane-controller", controller.Run(component.SignalContext(), component.OSInvocation()))
}
