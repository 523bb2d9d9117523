// Command kubectl is kubectl v1.37 built from its Go module (k8s.io/kubectl), for the simulated
// cluster: hack/kubectl.sh builds it into the cache.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
