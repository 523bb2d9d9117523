package daemon

import (
	"fmt"
	"io"
	"os"

	"github.com/go-logr/logr"

	"cdplane/internal/imex"
)

// IMEX backends.
const (
	IMEXReal       = "real"        // nvidia-imex and nvidia-imex-ctl
	IMEXSim        = "sim"         // the simulated IMEX in this process
	IMEXSimProcess = "sim-process" // the simulated IMEX as a child process (this binary's imex-sim subcommand)
)

// NewIMEX returns the IMEX supervisor of the named backend for this daemon's files; an IMEX
// process writes its output to stdout and stderr.
func NewIMEX(backend string, cfg Config, log logr.Logger, stdout, stderr io.Writer) (imex.Interface, error) {
	o := imex.Options{ConfigPath: cfg.IMEXConfigPath(), HostsPath: cfg.HostsPath, Log: log, Stdout: stdout, Stderr: stderr}
	switch backend {
	case IMEXReal:
		return imex.NewReal(o), nil
	case IMEXSim:
		return imex.NewSim(o), nil
	case IMEXSimProcess:
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding this binary for the simulated IMEX: %w", err)
		}
		o.Binary, o.Args = self, []string{"imex-sim"}
		return imex.NewSimProcess(o)
	default:
		return nil, fmt.Errorf("unknown IMEX backend %q: want %q, %q or %q", backend, IMEXReal, IMEXSim, IMEXSimProcess)
	}
}
