// Command imex-sim is the simulated IMEX daemon for machines without GPUs, installed in a
// simulated node's driver root as nvidia-imex and nvidia-imex-ctl; see imexsim.Main for its
// flags.
package main

import (
	"os"

	"cdplane/internal/sim/imexsim"
)

func main() {
	os.Exit(imexsim.Main(os.Args[1:], os.Stdout, os.Stderr))
}
