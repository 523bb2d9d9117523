package imexsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	"cdplane/internal/imex"
)

// The simulated command service answers one command a connection, one line each way:
//
//	QUERY   READY (the daemon has parsed its config and is listening)
//	STATUS  a Status as one line of JSON
//	CRASH   CRASHING, then the daemon ends abruptly with ErrCrashed (exit status CrashExitCode)
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
	// Ready is true once the daemon parsed its config and listens (always true in an answer).
	Ready bool `json:"ready"`
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
	// Reloads counts reloads, failed ones included.
	Reloads int `json:"reloads"`
	// LastReloadError is why the last reload failed; empty when it succeeded.
	LastReloadError string `json:"lastReloadError,omitempty"`
}

// serveCmd answers one command.
func (s *simServer) serveCmd(conn net.Conn) {
	_ = conn.SetDeadline(time.Now().Add(handshakeTimeout))
	line, err := readLine(conn)
	if err != nil {
		return
	}
	switch line {
	case cmdQuery:
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
	answer, err := simCommand(ctx, configPath, cmdQuery, maxLine)
	if err != nil {
		return err
	}
	if answer != answerReady {
		return fmt.Errorf("%w: simulated IMEX answered %q", imex.ErrNotReady, answer)
	}
	return nil
}

// Query asks the simulated IMEX serving the imexd config at configPath for its status.
func Query(ctx context.Context, configPath string) (Status, error) {
	var st Status
	answer, err := simCommand(ctx, configPath, cmdStatus, maxStatusLine)
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
	answer, err := simCommand(ctx, configPath, cmdCrash, maxLine)
	if err != nil {
		return err
	}
	if answer != answerCrashing {
		return fmt.Errorf("simulated IMEX refused to crash: %q", answer)
	}
	return nil
}

// simCommand sends one command to the command service named by the imexd config and returns
// the answer line.
func simCommand(ctx context.Context, configPath, command string, limit int64) (string, error) {
	cfg, err := imex.ReadIMEXConfig(configPath)
	if err != nil {
		return "", err
	}
	if !cfg.CmdEnabled || cfg.CmdPort == 0 {
		return "", fmt.Errorf("%s: IMEX command service is not enabled (IMEX_CMD_ENABLED, IMEX_CMD_PORT)", configPath)
	}
	ip := cfg.CmdBindIP
	if !ip.IsValid() {
		ip = cfg.BindIP
	}
	if !ip.IsValid() {
		ip = netip.MustParseAddr("127.0.0.1")
	}
	addr := netip.AddrPortFrom(ip, uint16(cfg.CmdPort)).String()
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", addr)
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
	if !complete {
		return "", fmt.Errorf("simulated IMEX at %s gave an incomplete answer %q", addr, answer)
	}
	return answer, nil
}
