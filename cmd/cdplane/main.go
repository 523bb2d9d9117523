// Command cdplane is the cdplane command line: benchmarks, NVML discovery, and (in later
// releases) plane lifecycle and the simulated cluster.
package main

import (
	"os"

	"cdplane/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
