package imex

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/go-logr/logr"
)

// DefaultStopGrace is how long Stop waits after SIGTERM before it kills IMEX.
const DefaultStopGrace = 10 * time.Second

var (
	// ErrAlreadyRunning is returned by Start while a run is in progress.
	ErrAlreadyRunning = errors.New("IMEX is already running")
	// ErrNotRunning is returned by Reload when no run is in progress.
	ErrNotRunning = errors.New("IMEX is not running")
	// ErrNotReady is wrapped by Ready's error when IMEX answered but is not ready.
	ErrNotReady = errors.New("IMEX is not ready")
)

// Interface supervises one IMEX daemon. One value serves one node; it runs at most one IMEX at
// a time and may start it again after a run ended.
//
// The ComputeDomain daemon uses it like this: it writes the files with WriteConfig once its
// entry and index appear and calls Start (no Reload on a first start: IMEX reads everything
// then); on each membership change it calls WriteConfig again and acts on Changes.Action
// (Reload, or Stop and Start); when the channel from Start delivers, the run ended and it
// starts IMEX again, with backoff; on shutdown it calls Stop. Its check subcommand, a separate
// process, builds an Interface over the same files and calls Ready only.
type Interface interface {
	// Start starts IMEX and returns once it was launched, not once it is ready (see Ready).
	// ctx bounds the start-up only; the run lasts until Stop or until IMEX exits. The channel
	// receives how the run ended, exactly once, and is then closed: nil when it ended because
	// of Stop, otherwise an error (an *ExitError for a process).
	// An implementation may refuse a bad configuration in Start itself; a process with a bad
	// configuration exits soon after starting, with the reason in ExitError.Stderr.
	Start(ctx context.Context) (<-chan error, error)
	// Reload asks the running IMEX to re-read its peers and reconnect (SIGUSR1 for a process).
	// It returns ErrNotRunning when no run is in progress. A process that has not installed its
	// signal handler yet dies of SIGUSR1; send reloads once Ready has passed, or treat the end
	// of the run like any other.
	Reload() error
	// Stop ends the run: SIGTERM, then a kill once the grace period or ctx runs out. It returns
	// nil when IMEX exited cleanly or was not running.
	Stop(ctx context.Context) error
	// Ready is the readiness query: nil once IMEX answers that it is ready, an error wrapping
	// ErrNotReady when it answers otherwise, another error when it cannot be asked. It needs no
	// prior Start on the same value: it talks to whatever IMEX serves the configured files.
	Ready(ctx context.Context) error
}

// Options configures an Interface implementation.
type Options struct {
	// ConfigPath is the imexd config (Settings.IMEXConfigPath).
	ConfigPath string
	// HostsPath is the hosts file the daemon writes peer names into; the real IMEX reads it
	// through the system resolver (it must then be /etc/hosts), an implementation in this
	// process reads it directly.
	HostsPath string
	// Binary is the IMEX executable; default "nvidia-imex", looked up on PATH.
	Binary string
	// Args come before the generated arguments.
	Args []string
	// CtlBinary is the readiness query tool for NewReal; default "nvidia-imex-ctl".
	CtlBinary string
	// Env is added to the environment of the processes started.
	Env []string
	// StopGrace is how long Stop waits after SIGTERM; zero means DefaultStopGrace, negative
	// that Stop waits until its context ends (the caller's deadline, or none: a daemon stopping
	// with its pod leaves the kill to the pod's grace period).
	StopGrace time.Duration
	// Stdout and Stderr receive the process's output; nil discards it (the end of stderr is
	// kept for ExitError either way).
	Stdout, Stderr io.Writer
	// Log receives decisions and state changes; the zero value discards them.
	Log logr.Logger
}

// stopGrace is how long Stop waits after SIGTERM before it kills; not positive: no limit of
// its own (only Stop's context).
func (o Options) stopGrace() time.Duration {
	if o.StopGrace != 0 {
		return o.StopGrace
	}
	return DefaultStopGrace
}

func (o Options) logger() logr.Logger {
	if o.Log.GetSink() == nil {
		return logr.Discard()
	}
	return o.Log
}

// ExitError says how an IMEX process ended on its own.
type ExitError struct {
	// Binary is the executable that ran.
	Binary string
	// Code is the exit status, or -1 when a signal ended the process.
	Code int
	// Signal names the signal that ended the process, if one did.
	Signal string
	// Stderr is the end of what the process wrote to stderr.
	Stderr string
}

// Error gives the status and the last of stderr.
func (e *ExitError) Error() string {
	how := fmt.Sprintf("exit status %d", e.Code)
	if e.Signal != "" {
		how = "killed by " + e.Signal
	}
	if e.Stderr == "" {
		return fmt.Sprintf("%s: %s", e.Binary, how)
	}
	return fmt.Sprintf("%s: %s: %s", e.Binary, how, e.Stderr)
}
