// Command imex-sim is the simulated IMEX daemon for machines without GPUs; see
// cdplane/internal/imex.SimMain for its flags.
package main

import (
	"os"

	"cdplane/internal/imex"
)

func main() {
	os.Exit(imex.SimMain(os.Args[1:], os.Stdout, os.Stderr))
}
