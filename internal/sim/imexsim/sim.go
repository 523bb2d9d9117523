// Package imexsim is the simulated IMEX daemon of the simulated cluster. It keeps the real one's
// contract: it reads the same imexd config keys, parses nodes.cfg and the hosts file strictly
// (a bad line fails start and names the line), listens on BIND_INTERFACE_IP:SERVER_PORT,
// connects to every listed peer, answers the readiness query on
// IMEX_CMD_BIND_INTERFACE_IP:IMEX_CMD_PORT and on the Unix domain socket
// IMEX_CMD_UNIX_DOMAIN_PATH (a host-managed IMEX's), re-reads its node list on reload, and can be
// made to crash on demand. Several simulated nodes share one machine by binding distinct loopback
// addresses (127.x.y.z) on the same ports.
//
// It runs two ways: as a program (Main) installed in a simulated node's driver root as
// nvidia-imex and nvidia-imex-ctl, which the daemon finds and runs exactly as it runs the real
// ones; or in the simulated kubelet's process (New), for in-process daemons.
package imexsim

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr/funcr"

	"cdplane/internal/imex"
)

// ErrCrashed ends a simulated IMEX run that was told to crash.
var ErrCrashed = errors.New("simulated IMEX crashed on request")

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// CrashExitCode is the exit status of a simulated IMEX process that was told to crash.
const CrashExitCode = 3

// Sim is the simulated IMEX running inside this process, goroutine-backed. It implements
// imex.Interface without signals: Reload re-reads the node list directly and returns its error.
type Sim struct {
	opts imex.Options

	mu  sync.Mutex
	srv *simServer
}

var _ imex.Interface = (*Sim)(nil)

// New returns a simulated IMEX that serves the imexd config at o.ConfigPath and resolves
// peer names through o.HostsPath. Binary, Args, CtlBinary, Env and the output writers are not
// used.
func New(o imex.Options) *Sim {
	return &Sim{opts: o}
}

// Start parses the configuration and starts listening and connecting; a configuration the
// real IMEX would refuse fails Start with a *imex.ConfigError naming the line.
func (s *Sim) Start(ctx context.Context) (<-chan error, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("starting simulated IMEX: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil && !isClosed(s.srv.done) {
		return nil, imex.ErrAlreadyRunning
	}
	srv := newSimServer(s.opts.ConfigPath, s.opts.HostsPath, s.opts.Log)
	if err := srv.start(); err != nil {
		return nil, fmt.Errorf("starting simulated IMEX: %w", err)
	}
	s.srv = srv
	exited := make(chan error, 1)
	go func() {
		<-srv.done
		exited <- srv.result
		close(exited)
	}()
	return exited, nil
}

func (s *Sim) current() *simServer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil || isClosed(s.srv.done) {
		return nil
	}
	return s.srv
}

// Reload re-reads nodes.cfg and the hosts file and reconnects accordingly. On a bad
// configuration it keeps the previous node list and returns the error.
func (s *Sim) Reload() error {
	srv := s.current()
	if srv == nil {
		return imex.ErrNotRunning
	}
	return srv.reload()
}

// Stop shuts the simulated IMEX down cleanly and waits for it, or for ctx.
func (s *Sim) Stop(ctx context.Context) error {
	srv := s.current()
	if srv == nil {
		return nil
	}
	srv.stop()
	select {
	case <-srv.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stopping simulated IMEX: %w", ctx.Err())
	}
}

// Ready asks the command service, exactly as a separate check process would (Ready).
func (s *Sim) Ready(ctx context.Context) error {
	return Ready(ctx, s.opts.ConfigPath)
}

// HostsFileEnv names the file that stands for /etc/hosts for a simulated IMEX process: the
// simulated kubelet sets it to the pod's hosts file, as a real container's resolver reads the
// pod's /etc/hosts.
const HostsFileEnv = "CDPLANE_SIM_HOSTS_FILE"

// Main runs the simulated IMEX as a program and returns its exit status; the imex-sim binary
// calls it, installed in a simulated node's driver root as nvidia-imex and nvidia-imex-ctl. Its
// flags mirror nvidia-imex (-c CONFIG) and, for queries, nvidia-imex-ctl (-q prints READY;
// --u=PATH asks the command service on a Unix domain socket):
//
//	imex-sim -c /etc/nvidia-imex/config.cfg [-hosts-file FILE] [-v 1]
//	imex-sim -q -c CONFIG         # readiness query: prints READY, exit status 0 when ready
//	imex-sim -q --u=SOCKET        # the same over the Unix domain socket SOCKET (-u SOCKET too)
//	imex-sim -status -c CONFIG    # prints the status as JSON (-status --u=SOCKET too)
//	imex-sim -crash -c CONFIG     # tells the running instance to crash (-crash --u=SOCKET too)
//
// A query finds the command service through the config (its TCP port when IMEX_CMD_PORT is set,
// else IMEX_CMD_UNIX_DOMAIN_PATH) unless --u names the socket; one that cannot ask or is not
// answered READY prints the reason, naming the address or socket, to stderr and exits with
// status 1. -u without a query is refused (status 2).
//
// Running, it reloads on SIGUSR1, stops cleanly (status 0) on SIGTERM or SIGINT, exits with
// status 1 when its configuration is refused (the message names the line) and with
// CrashExitCode when told to crash. A command socket (IMEX_CMD_UNIX_DOMAIN_PATH) that an earlier,
// killed run left behind is replaced; the socket is removed when the run ends.
func Main(args []string, stdout, stderr io.Writer) int {
	// Catch signals first, so that an early SIGUSR1 does not kill the process.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	fs := flag.NewFlagSet("imex-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	config := fs.String("c", "/etc/nvidia-imex/config.cfg", "imexd config `path`")
	hosts := fs.String("hosts-file", cmp.Or(os.Getenv(HostsFileEnv), "/etc/hosts"), "hosts `file` that maps peer names to addresses (default $"+HostsFileEnv+", else /etc/hosts)")
	query := fs.Bool("q", false, "query readiness once and print READY (like nvidia-imex-ctl -q)")
	socket := fs.String("u", "", "for a query: ask the command service on this Unix domain socket `path` "+
		"instead of finding it through the config (like nvidia-imex-ctl --u=PATH)")
	status := fs.Bool("status", false, "print the running instance's status as JSON")
	crash := fs.Bool("crash", false, "tell the running instance to crash")
	verbosity := fs.Int("v", 0, "log verbosity")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	queryMode := *query || *status || *crash
	if *socket != "" && !queryMode {
		fmt.Fprintln(stderr, "imex-sim: -u is for queries only (-q, -status, -crash)")
		return 2
	}
	if queryMode {
		return simClient(*config, *socket, *query, *status, stdout, stderr)
	}

	log := funcr.New(func(prefix, args string) {
		fmt.Fprintln(stderr, "imex-sim:", prefix, args)
	}, funcr.Options{Verbosity: *verbosity})
	srv := newSimServer(*config, *hosts, log)
	if err := srv.start(); err != nil {
		fmt.Fprintf(stderr, "imex-sim: %v\n", err)
		return 1
	}
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGUSR1 {
				if err := srv.reload(); err != nil {
					log.Error(err, "Reload failed, keeping the previous node list")
				}
				continue
			}
			srv.stop()
			<-srv.done
			return 0
		case <-srv.done:
			fmt.Fprintf(stderr, "imex-sim: %v\n", srv.result)
			return CrashExitCode
		}
	}
}

// simClient runs one of Main's query modes against the command service on the Unix domain
// socket at socket, or, when that is empty, the one the config names.
func simClient(config, socket string, query, status bool, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	target := unixTarget(socket)
	var err error
	if socket == "" {
		target, err = configTarget(config)
	}
	switch {
	case err != nil:
	case query:
		if err = readyAt(ctx, target); err == nil {
			fmt.Fprintln(stdout, answerReady)
		}
	case status:
		var st Status
		if st, err = queryAt(ctx, target); err == nil {
			err = writeJSON(stdout, st)
		}
	default:
		err = crashAt(ctx, target)
	}
	if err != nil {
		fmt.Fprintf(stderr, "imex-sim: %v\n", err)
		return 1
	}
	return 0
}

func writeJSON(w io.Writer, st Status) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding status: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", data)
	return err
}
