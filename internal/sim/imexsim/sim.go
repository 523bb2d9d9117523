// Package imexsim is the simulated IMEX daemon of the simulated cluster. It keeps the real one's
// contract: it reads the same imexd config keys, parses nodes.cfg and the hosts file strictly
// (a bad line fails start and names the line), listens on its own address (BIND_INTERFACE_IP)
// and SERVER_PORT, connects to every listed peer, answers the readiness query on
// IMEX_CMD_BIND_INTERFACE_IP:IMEX_CMD_PORT and on the Unix domain socket
// IMEX_CMD_UNIX_DOMAIN_PATH (a host-managed IMEX's), and can be made to crash on demand. Several
// simulated nodes share one machine by binding distinct loopback addresses (127.x.y.z) on the
// same ports.
//
// What the real daemon learns from its host it learns from stand-ins in its environment (the
// process environment for Main, imex.Options.Env for an in-process Sim): this host's addresses
// (LocalAddrsEnv), the container's resolv.conf (ResolvConfEnv) and hosts file (HostsFileEnv),
// the node's directory (NodeDirEnv) and the container's view of the filesystem
// (ContainerPathsEnv). A behaviour whose stand-in is not set is not modelled.
//
// It is as strict as the real daemon where a supervisor can get things wrong:
//   - It reads its configuration only at start. A reload (SIGUSR1) re-reads only the hosts file,
//     resolves the names of the node list read at start again and reconnects; a changed
//     nodes.cfg or imexd config takes effect only when it starts again.
//   - It honours a reload at most once every DefaultReloadInterval (5 s); one sooner after the
//     last honoured reload is ignored (counted in Status.IgnoredReloads).
//   - After start it spends DefaultStartupPhase on its start-up checks before it listens for
//     peers, connects and answers the readiness query; a reload during them kills it, because the
//     real daemon installs its SIGUSR1 handler only after them (ErrKilledBySignal in this
//     process, death by SIGUSR1 for a process).
//   - With BIND_INTERFACE_IP empty its own address is the one node list entry whose address is
//     one of this host's (LocalAddrsEnv), fixed at start; none is a *imex.ConfigError, and so is
//     an empty BIND_INTERFACE_IP without LocalAddrsEnv.
//   - Names go through the system resolver, as glibc's: the hosts file first (read on every
//     lookup), then DNS, trying the resolv.conf search list as ndots says (default ndots 1, no
//     search list). Every candidate is one simulated DNS lookup, and all fail: the cluster DNS
//     knows no IMEX name (Status.DNSLookups, DNSLookups). Unresolved names are tried again every
//     DefaultDNSRetryInterval (5 s), so a name the hosts file maps later resolves without a
//     reload, and every retry's lookups count again.
//   - Peers accept each other only when their node lists, as written, are the same: the
//     handshake carries a digest of the list, and a peer with another list is refused ("REJECT
//     node list differs"), whichever ComputeDomain either serves (Status.RejectedPeers).
//   - With a node directory: host names in the node list need driver MinHostnameDriverVersion
//     (the node's DriverVersionPath), or start fails with a *imex.ConfigError naming both
//     versions; at the end of its start-up phase a run takes the node's IMEX session
//     (SessionLockPath), and a second run on the node ends with ErrSessionInUse
//     (NV_ERR_IN_USE; a process exits with status 1); the run marks the session unsafe
//     (UnsafeMarkerPath, listing the peers it connected to) and clears the mark when it stops
//     cleanly. A crash or kill leaves the mark, and the next run that finds it recovers when the
//     config sets IMEX_WAIT_FOR_QUORUM=RECOVERY: it answers the readiness query RECOVERY, not
//     READY, until it is connected again to every peer of its node list that the unsafe run was
//     connected to, or DefaultRecoveryTimeout (20 min) passes.
//   - In a container (ContainerPathsEnv set: the simulated kubelet's IMEX of a daemon
//     container) it has only what the container has: it refuses to start, before it takes the
//     session, when libnvidia-ml.so.1 is in none of the loader's directories (LibraryPathEnv,
//     then StandardLibDirs) or /dev/nvidiactl or the IMEX management device
//     /dev/nvidia-caps/nvidia-cap<minor> (minor from the node's IMEXMgmtCapabilityPath) is not
//     in the container's view with its host file, each a *MissingError in the real program's
//     or the dynamic loader's words (a process exits with status 1, or LoaderExitCode). Outside
//     a container (the host-managed service the simulator runs, most tests) nothing is checked.
//   - After a clean stop of a run that held the node's session, the session stays held for the
//     shutdown delay (ShutdownDelayEnv; DefaultShutdownDelay, 3 s, in a container, none
//     outside unless set), as the driver releases a real IMEX's memory exports after it ends:
//     an IMEX started on the node meanwhile ends with ErrSessionInUse (ReleasingPath records
//     until when). The run itself ends at once. A crash or kill leaves nothing to release.
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

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"cdplane/internal/imex"
)

var (
	// ErrCrashed ends a simulated IMEX run that was told to crash.
	ErrCrashed = errors.New("simulated IMEX crashed on request")
	// ErrKilledBySignal ends an in-process simulated IMEX run that was reloaded during its
	// start-up phase: the real daemon has no SIGUSR1 handler yet and dies of the signal, which a
	// process supervisor sees as an *imex.ExitError whose Signal is SIGUSR1's name.
	ErrKilledBySignal = errors.New("simulated IMEX killed by SIGUSR1 before its handler was installed")
)

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
// imex.Interface without signals: Reload does what SIGUSR1 does to the real daemon and returns
// its error.
type Sim struct {
	opts imex.Options
	// startupPhase, reloadInterval, dnsRetryInterval, recoveryTimeout and now configure the
	// runs Start begins: New sets DefaultStartupPhase, DefaultReloadInterval,
	// DefaultDNSRetryInterval, DefaultRecoveryTimeout and time.Now; this package's tests change
	// them.
	startupPhase     time.Duration
	reloadInterval   time.Duration
	dnsRetryInterval time.Duration
	recoveryTimeout  time.Duration
	now              func() time.Time

	mu  sync.Mutex
	srv *simServer
}

var _ imex.Interface = (*Sim)(nil)

// New returns a simulated IMEX that serves the imexd config at o.ConfigPath and resolves
// peer names through o.HostsPath (default: HostsFileEnv in o.Env, else /etc/hosts). o.Env
// stands for its process environment: it takes its stand-ins from there (NodeDirEnv,
// LocalAddrsEnv, ResolvConfEnv, HostsFileEnv, ContainerPathsEnv, LibraryPathEnv,
// ShutdownDelayEnv). Binary, Args, CtlBinary and the output writers are not used.
func New(o imex.Options) *Sim {
	return &Sim{
		opts:             o,
		startupPhase:     DefaultStartupPhase,
		reloadInterval:   DefaultReloadInterval,
		dnsRetryInterval: DefaultDNSRetryInterval,
		recoveryTimeout:  DefaultRecoveryTimeout,
		now:              time.Now,
	}
}

// Start reads the configuration (the imexd config, nodes.cfg and the hosts file: the node list
// stays as read here for the whole run) and binds the listeners; a configuration the real IMEX
// would refuse fails Start with a *imex.ConfigError naming the line, and in a container
// (ContainerPathsEnv) a missing device node or library fails it with a *MissingError. The run
// then spends its start-up phase (DefaultStartupPhase) before it answers peers and the
// readiness query and connects to its peers: Ready fails until then, and a Reload kills the
// run. At the end of the start-up phase a run with a node directory takes the node's IMEX
// session; when another run holds it, the run ends with an error wrapping ErrSessionInUse.
func (s *Sim) Start(ctx context.Context) (<-chan error, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("starting simulated IMEX: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil && !isClosed(s.srv.done) {
		return nil, imex.ErrAlreadyRunning
	}
	env, err := standInsFrom(envLookup(s.opts.Env))
	if err != nil {
		return nil, fmt.Errorf("starting simulated IMEX: %w", err)
	}
	srv := newSimServer(s.opts.ConfigPath, s.opts.HostsPath, env, s.opts.Log)
	srv.startupPhase, srv.reloadInterval, srv.now = s.startupPhase, s.reloadInterval, s.now
	srv.dnsRetryInterval, srv.recoveryTimeout = s.dnsRetryInterval, s.recoveryTimeout
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

// Reload does what SIGUSR1 does to the real IMEX. It re-reads the hosts file only, resolves
// the names of the node list read at Start again and reconnects accordingly; nodes.cfg is not
// read again (a changed one takes effect on the next Start). A hosts file the parser refuses
// keeps the previous resolution and its error is returned. A Reload within the reload interval
// (DefaultReloadInterval) of the last honoured one is ignored: it changes nothing, returns nil
// and is counted in Status.IgnoredReloads. A Reload during the start-up phase kills the run:
// the run ends with ErrKilledBySignal and Reload returns an error wrapping it.
func (s *Sim) Reload() error {
	srv := s.current()
	if srv == nil {
		return imex.ErrNotRunning
	}
	return srv.reload()
}

// Stop shuts the simulated IMEX down cleanly and waits for it, or for ctx. A run that held the
// node's IMEX session leaves it held for the shutdown delay (ShutdownDelayEnv) after it ends.
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
// Running, it reads its configuration once, exits with status 1 when it is refused (the message
// names the line), then spends its start-up phase (-startup-phase, DefaultStartupPhase) before it
// listens for peers, connects and answers the readiness query. Like the real daemon it installs
// its SIGUSR1 handler only when that phase is over: a SIGUSR1 before kills the process (the
// signal's default action; the Go runtime's own start-up, before Main, still ignores one).
// Afterwards SIGUSR1 re-reads the hosts file only, resolving the names of the node list read at
// start again, and reconnects (nodes.cfg is not read again; a refused hosts file keeps the
// previous resolution and is logged); it is honoured at most once every -reload-interval
// (DefaultReloadInterval), sooner ones are ignored. SIGTERM or SIGINT stops it cleanly (status 0)
// at any time, start-up phase included, leaving the node's IMEX session held for the shutdown
// delay (ShutdownDelayEnv) when it held it; told to crash it exits with CrashExitCode. A command
// socket (IMEX_CMD_UNIX_DOMAIN_PATH) that an earlier, killed run left behind is replaced; the
// socket is removed when the run ends. Running changes this process's SIGUSR1 disposition: run
// the daemon as a program, not in a process that has other uses for the signal.
//
// It takes its stand-ins from its environment (NodeDirEnv, LocalAddrsEnv, ResolvConfEnv,
// HostsFileEnv, ContainerPathsEnv), which the simulated kubelet sets on every container, and
// ShutdownDelayEnv. In a container (ContainerPathsEnv) a missing library ends it as the dynamic
// loader does (status LoaderExitCode, the loader's message after the program's path), a
// missing device node with status 1. When another run holds the node's IMEX session it exits
// with status 1 at the end of its start-up phase, naming NV_ERR_IN_USE. -dns-retry-interval (DefaultDNSRetryInterval) and -recovery-timeout
// (DefaultRecoveryTimeout) change how often unresolved names are retried and how long a
// recovery waits.
func Main(args []string, stdout, stderr io.Writer) int {
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
	startupPhase := fs.Duration("startup-phase", DefaultStartupPhase, "how long the start-up checks take, before "+
		"it listens, connects, answers READY and installs its SIGUSR1 handler")
	reloadInterval := fs.Duration("reload-interval", DefaultReloadInterval, "least `time` between two honoured "+
		"reloads (SIGUSR1); sooner ones are ignored")
	dnsRetry := fs.Duration("dns-retry-interval", DefaultDNSRetryInterval, "`time` between two tries to resolve "+
		"the node list's unresolved names (0: no retries)")
	recoveryTimeout := fs.Duration("recovery-timeout", DefaultRecoveryTimeout, "how long a recovery from an unsafe "+
		"termination waits for the peers of the unsafe run (0: no waiting)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	queryMode := *query || *status || *crash
	switch {
	case *socket != "" && !queryMode:
		fmt.Fprintln(stderr, "imex-sim: -u is for queries only (-q, -status, -crash)")
		return 2
	case *startupPhase < 0 || *reloadInterval < 0 || *dnsRetry < 0 || *recoveryTimeout < 0:
		fmt.Fprintln(stderr, "imex-sim: -startup-phase, -reload-interval, -dns-retry-interval and -recovery-timeout "+
			"must not be negative")
		return 2
	case queryMode:
		return simClient(*config, *socket, *query, *status, stdout, stderr)
	}

	log := funcr.New(func(prefix, args string) {
		fmt.Fprintln(stderr, "imex-sim:", prefix, args)
	}, funcr.Options{Verbosity: *verbosity})
	env, err := standInsFrom(os.LookupEnv)
	if err != nil {
		fmt.Fprintf(stderr, "imex-sim: %v\n", err)
		return 1
	}
	srv := newSimServer(*config, *hosts, env, log)
	srv.startupPhase, srv.reloadInterval = *startupPhase, *reloadInterval
	srv.dnsRetryInterval, srv.recoveryTimeout = *dnsRetry, *recoveryTimeout
	return serveMain(srv, log, stderr)
}

// serveMain runs the daemon for Main and returns its exit status.
func serveMain(srv *simServer, log logr.Logger, stderr io.Writer) int {
	// SIGTERM and SIGINT stop it cleanly at any time.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	// The real daemon installs its SIGUSR1 handler only after its start-up checks, so that a
	// SIGUSR1 before kills it. The Go runtime ignores SIGUSR1 unless told to deliver it: give it
	// its default action until the start-up phase is over, when the handler is installed.
	if err := defaultSignalAction(syscall.SIGUSR1); err != nil {
		log.Error(err, "A SIGUSR1 during the start-up phase will be ignored, not kill the process")
	}
	srv.beforeStarted = func() { signal.Notify(sigs, syscall.SIGUSR1) }
	if err := srv.start(); err != nil {
		var missing *MissingError
		if errors.As(err, &missing) && missing.Loader {
			// The loader's message, after the program's path, and its status.
			fmt.Fprintf(stderr, "%s: %v\n", os.Args[0], err)
			return LoaderExitCode
		}
		fmt.Fprintf(stderr, "imex-sim: %v\n", err)
		return 1
	}
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGUSR1 {
				if err := srv.reload(); err != nil {
					log.Error(err, "Reload failed, keeping the previous name resolution")
				}
				continue
			}
			srv.stop()
			<-srv.done
			return 0
		case <-srv.done:
			fmt.Fprintf(stderr, "imex-sim: %v\n", srv.result)
			if errors.Is(srv.result, ErrSessionInUse) {
				return 1
			}
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
