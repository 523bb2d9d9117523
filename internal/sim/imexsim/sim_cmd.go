package imexsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"cdplane/internal/imex"
)

// The simulated command service answers one command a connection, one line each way:
//
//	QUERY   READY (the daemon has parsed its config and finished its start-up phase), or
//	        RECOVERY while it recovers from an unsafe termination
//	STATUS  a Status as one line of JSON
//	CRASH   CRASHING, then the daemon ends abruptly with ErrCrashed (exit status CrashExitCode)
//
// During the start-up phase it answers nothing: the connection is closed without an answer, as
// the real daemon answers nothing until it has initialised.
const (
	cmdQuery  = "QUERY"
	cmdStatus = "STATUS"
	cmdCrash  = "CRASH"

	answerReady    = "READY"
	answerCrashing = "CRASHING"

	// maxStatusLine bounds a STATUS answer.
	maxStatusLine = 1 << 20
)

// Status is what a simulated IMEX reports about itself.
type Status struct {
	// Ready is true once the daemon finished its start-up phase (the daemon answers nothing
	// before) and is not recovering.
	Ready bool `json:"ready"`
	// Recovering is true while the daemon recovers from an unsafe termination of the node's
	// last IMEX (IMEX_WAIT_FOR_QUORUM=RECOVERY): the readiness query answers RECOVERY until it
	// is connected to the peers of that run again (RecoveryWaitingFor lists those it is not) or
	// the recovery timeout (DefaultRecoveryTimeout) passes.
	Recovering         bool     `json:"recovering,omitempty"`
	RecoveryWaitingFor []string `json:"recoveryWaitingFor,omitempty"`
	// Address is where it listens for peers (BIND_INTERFACE_IP:SERVER_PORT).
	Address string `json:"address"`
	// Peers are the other nodes' addresses its node list resolves to, sorted.
	Peers []string `json:"peers"`
	// Unresolved are node list entries the hosts file does not map (empty slots).
	Unresolved []string `json:"unresolved,omitempty"`
	// Connected are the peers whose welcome it holds an outgoing connection with, sorted.
	Connected []string `json:"connected"`
	// Inbound are the peers connected to it, sorted.
	Inbound []string `json:"inbound"`
	// Reloads counts the reloads honoured, failed ones included.
	Reloads int `json:"reloads"`
	// IgnoredReloads counts the reloads ignored because they came within the reload interval
	// (DefaultReloadInterval) of the last honoured one.
	IgnoredReloads int `json:"ignoredReloads"`
	// LastReloadError is why the last reload failed; empty when it succeeded.
	LastReloadError string `json:"lastReloadError,omitempty"`
	// DNSLookups counts the simulated DNS lookups of this run: every candidate name the
	// resolver tried for a node list name the hosts file did not map, at start, on reloads and
	// on the retries of unresolved names (DefaultDNSRetryInterval). All fail.
	DNSLookups int `json:"dnsLookups"`
	// RejectedPeers counts the peer handshakes this daemon refused; RejectedPeersByReason
	// splits them: badHello (the claimed address is not the connection's source),
	// notInNodeList, nodeListDiffers (the peer's node list is another one).
	RejectedPeers         int            `json:"rejectedPeers"`
	RejectedPeersByReason map[string]int `json:"rejectedPeersByReason,omitempty"`
}

// serveCmd answers one command; during the start-up phase it closes the connection without an
// answer.
func (s *simServer) serveCmd(conn net.Conn) {
	if !s.isStarted() {
		return
	}
	_ = conn.SetDeadline(time.Now().Add(handshakeTimeout))
	line, err := readLine(conn)
	if err != nil {
		return
	}
	switch line {
	case cmdQuery:
		if s.isRecovering() {
			fmt.Fprintln(conn, answerRecovery)
			return
		}
		fmt.Fprintln(conn, answerReady)
	case cmdStatus:
		data, err := json.Marshal(s.status())
		if err != nil {
			fmt.Fprintf(conn, "ERROR %v\n", err)
			return
		}
		fmt.Fprintf(conn, "%s\n", data)
	case cmdCrash:
		s.log.Info("Crash requested over the command service")
		fmt.Fprintln(conn, answerCrashing)
		s.crash()
	default:
		fmt.Fprintf(conn, "ERROR unknown command %q\n", line)
	}
}

// Ready is the simulated readiness query: it finds the command service through the imexd
// config at configPath, as nvidia-imex-ctl -c does, and asks it. It returns nil when the
// daemon answers READY, and an error wrapping imex.ErrNotReady when it answers otherwise.
func Ready(ctx context.Context, configPath string) error {
	target, err := configTarget(configPath)
	if err != nil {
		return err
	}
	return readyAt(ctx, target)
}

// ReadyUnix is the simulated readiness query over the command service's Unix domain socket
// (IMEX_CMD_UNIX_DOMAIN_PATH), as nvidia-imex-ctl -q --u=socketPath asks a host-managed IMEX.
// It returns like Ready; when nothing listens at socketPath the error names it.
func ReadyUnix(ctx context.Context, socketPath string) error {
	return readyAt(ctx, unixTarget(socketPath))
}

func readyAt(ctx context.Context, target cmdTarget) error {
	answer, err := simCommand(ctx, target, cmdQuery, maxLine)
	if err != nil {
		return err
	}
	if answer != answerReady {
		return fmt.Errorf("%w: simulated IMEX at %s answered %q", imex.ErrNotReady, target.addr, answer)
	}
	return nil
}

// Query asks the simulated IMEX serving the imexd config at configPath for its status.
func Query(ctx context.Context, configPath string) (Status, error) {
	target, err := configTarget(configPath)
	if err != nil {
		return Status{}, err
	}
	return queryAt(ctx, target)
}

// QueryUnix asks the simulated IMEX whose command service listens on the Unix domain socket
// socketPath for its status.
func QueryUnix(ctx context.Context, socketPath string) (Status, error) {
	return queryAt(ctx, unixTarget(socketPath))
}

func queryAt(ctx context.Context, target cmdTarget) (Status, error) {
	var st Status
	answer, err := simCommand(ctx, target, cmdStatus, maxStatusLine)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal([]byte(answer), &st); err != nil {
		return st, fmt.Errorf("decoding simulated IMEX status %q: %w", answer, err)
	}
	return st, nil
}

// Crash tells the simulated IMEX serving the imexd config at configPath to crash: its run
// ends with ErrCrashed, or its process exits with CrashExitCode.
func Crash(ctx context.Context, configPath string) error {
	target, err := configTarget(configPath)
	if err != nil {
		return err
	}
	return crashAt(ctx, target)
}

func crashAt(ctx context.Context, target cmdTarget) error {
	answer, err := simCommand(ctx, target, cmdCrash, maxLine)
	if err != nil {
		return err
	}
	if answer != answerCrashing {
		return fmt.Errorf("simulated IMEX at %s refused to crash: %q", target.addr, answer)
	}
	return nil
}

// cmdTarget is where a client reaches a command service: network "tcp" with a host:port
// address, or "unix" with a socket path.
type cmdTarget struct {
	network, addr string
}

func unixTarget(socketPath string) cmdTarget {
	return cmdTarget{network: "unix", addr: socketPath}
}

// configTarget finds the command service through the imexd config at configPath: its TCP
// address when IMEX_CMD_PORT is set, else its Unix domain socket.
func configTarget(configPath string) (cmdTarget, error) {
	cfg, err := imex.ReadIMEXConfig(configPath)
	if err != nil {
		return cmdTarget{}, err
	}
	switch {
	case !cfg.CmdEnabled || (cfg.CmdPort == 0 && cfg.CmdUnixPath == ""):
		return cmdTarget{}, fmt.Errorf("%s: IMEX command service is not enabled "+
			"(IMEX_CMD_ENABLED, IMEX_CMD_PORT or IMEX_CMD_UNIX_DOMAIN_PATH)", configPath)
	case cfg.CmdPort == 0:
		return unixTarget(cfg.CmdUnixPath), nil
	}
	ip := cfg.CmdBindIP
	if !ip.IsValid() {
		ip = cfg.BindIP
	}
	if !ip.IsValid() {
		ip = netip.MustParseAddr("127.0.0.1")
	}
	return cmdTarget{network: "tcp", addr: netip.AddrPortFrom(ip, uint16(cfg.CmdPort)).String()}, nil
}

// simCommand sends one command to the command service at target and returns the answer line.
func simCommand(ctx context.Context, target cmdTarget, command string, limit int64) (string, error) {
	addr := target.addr
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, target.network, addr)
	if err != nil {
		return "", fmt.Errorf("asking simulated IMEX at %s: %w", addr, err)
	}
	defer conn.Close()
	deadline := time.Now().Add(handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	if _, err := fmt.Fprintln(conn, command); err != nil {
		return "", fmt.Errorf("asking simulated IMEX at %s: %w", addr, err)
	}
	data, err := io.ReadAll(io.LimitReader(conn, limit))
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("reading answer from simulated IMEX at %s: %w", addr, err)
	}
	answer, complete := strings.CutSuffix(string(data), "\n")
	if len(data) == 0 {
		return "", fmt.Errorf("simulated IMEX at %s closed the connection without an answer (still starting up?)", addr)
	}
	if !complete {
		return "", fmt.Errorf("simulated IMEX at %s gave an incomplete answer %q", addr, answer)
	}
	return answer, nil
}

// maxUnixPath is the longest path a Unix domain socket can be bound to on Linux: sun_path
// holds 108 bytes, the terminating NUL included.
const maxUnixPath = 107

// listenCmd opens the command service: on IMEX_CMD_BIND_INTERFACE_IP:IMEX_CMD_PORT when the
// port is set, and on the Unix domain socket IMEX_CMD_UNIX_DOMAIN_PATH when that is set; at
// least one of them must be. On error no listener is left open.
func (s *simServer) listenCmd() ([]net.Listener, error) {
	if s.cfg.CmdPort == 0 && s.cfg.CmdUnixPath == "" {
		return nil, &imex.ConfigError{File: s.configPath,
			Reason: "IMEX_CMD_ENABLED=1 needs IMEX_CMD_PORT or IMEX_CMD_UNIX_DOMAIN_PATH"}
	}
	var lns []net.Listener
	if s.cfg.CmdPort != 0 {
		// The real daemon binds every interface when IMEX_CMD_BIND_INTERFACE_IP is empty;
		// simulated nodes share one host, so this one stays on its own address.
		ip := s.cfg.CmdBindIP
		if !ip.IsValid() {
			ip = s.self
		}
		ln, err := net.Listen("tcp", netip.AddrPortFrom(ip, uint16(s.cfg.CmdPort)).String())
		if err != nil {
			return nil, fmt.Errorf("listening for commands: %w", err)
		}
		lns = append(lns, ln)
	}
	if s.cfg.CmdUnixPath != "" {
		ln, err := listenUnix(s.cfg.CmdUnixPath)
		if err != nil {
			for _, l := range lns {
				_ = l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// listenUnix listens on the Unix domain socket at path. A socket file that an earlier run left
// there (a process that was killed cannot remove it) and that nothing listens on any more is
// removed first; a socket that something still listens on, or a file of another kind, is an
// error naming the path. The listener removes the socket file when it is closed.
func listenUnix(path string) (*net.UnixListener, error) {
	if len(path) > maxUnixPath {
		return nil, fmt.Errorf("command socket %s: path longer than %d bytes, the limit of a Unix domain socket",
			path, maxUnixPath)
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listening for commands: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	return ln, nil
}

// removeStaleSocket removes a socket file at path that nothing listens on.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking command socket: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("command socket %s: the path is taken by a file that is not a socket (mode %s)", path, fi.Mode())
	}
	conn, err := net.DialTimeout("unix", path, handshakeTimeout)
	switch {
	case err == nil:
		_ = conn.Close()
		return fmt.Errorf("command socket %s: another command service listens there", path)
	case !errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("checking command socket %s for a listener: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing stale command socket: %w", err)
	}
	return nil
}
