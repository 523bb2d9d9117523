package imexsim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"cdplane/internal/imex"
)

// Reasons a listening simulated IMEX refuses a peer's handshake, as counted in
// Status.RejectedPeersByReason.
const (
	rejectBadHello        = "badHello"
	rejectNotInNodeList   = "notInNodeList"
	rejectNodeListDiffers = "nodeListDiffers"
)

// peerLink is the outgoing connection to one peer, kept up by runLink.
type peerLink struct {
	addr      netip.Addr
	cancel    context.CancelFunc
	connected bool // guarded by simServer.mu
}

// nodeListDigest identifies a node list by its entries as written (names or addresses, not
// what they resolve to): the first 16 hex digits of the SHA-256 of the entries joined by
// newlines. Peers exchange it in their handshake.
func nodeListDigest(nodes []imex.Node) string {
	entries := make([]string, len(nodes))
	for i, n := range nodes {
		entries[i] = n.Entry
	}
	sum := sha256.Sum256([]byte(strings.Join(entries, "\n")))
	return hex.EncodeToString(sum[:])[:16]
}

// servePeer runs the listening side of the peer protocol; during the start-up phase it closes
// the connection without an answer.
func (s *simServer) servePeer(conn net.Conn) {
	if !s.isStarted() {
		return
	}
	_ = conn.SetReadDeadline(time.Now().Add(handshakeTimeout))
	line, err := readLine(conn)
	if err != nil {
		return
	}
	remote := conn.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	reason, why := s.admit(conn, remote, line)
	if reason != "" {
		fmt.Fprintf(conn, "REJECT %s\n", why)
		return
	}
	defer func() {
		s.mu.Lock()
		delete(s.inbound, conn)
		s.mu.Unlock()
	}()
	_ = conn.SetReadDeadline(time.Time{})
	if _, err := fmt.Fprintf(conn, "WELCOME %s\n", s.self); err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, conn)
}

// admit checks a peer's hello and registers its connection; it returns why it refuses it
// otherwise: the reason counted and the REJECT text.
func (s *simServer) admit(conn net.Conn, remote netip.Addr, hello string) (reason, why string) {
	fields := strings.Fields(hello)
	var claimed netip.Addr
	if len(fields) == 3 && fields[0] == "HELLO" {
		claimed, _ = netip.ParseAddr(fields[1])
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case claimed != remote:
		reason, why = rejectBadHello, fmt.Sprintf("bad hello %q from %s", hello, remote)
	case !s.peerSetLocked()[remote]:
		reason, why = rejectNotInNodeList, fmt.Sprintf("%s is not in the node list of %s", remote, s.self)
	case fields[2] != s.digest:
		reason, why = rejectNodeListDiffers, "node list differs"
	default:
		s.inbound[conn] = remote
		return "", ""
	}
	s.rejected[reason]++
	s.log.V(2).Info("Refused a peer", "peer", remote.String(), "reason", reason)
	return reason, why
}

// runLink keeps a connection to one peer up, retrying with backoff (minLinkBackoff doubling up
// to the link backoff cap, from the start again after a connection the peer welcomed), until
// ctx ends.
func (s *simServer) runLink(ctx context.Context, link *peerLink) {
	defer s.wg.Done()
	first := wait.Backoff{Duration: minLinkBackoff, Factor: 2, Cap: s.env.linkBackoffCap(), Steps: math.MaxInt32}
	backoff := first
	for ctx.Err() == nil {
		if s.connectOnce(ctx, link) {
			backoff = first
		}
		timer := time.NewTimer(backoff.Step())
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		timer.Stop()
	}
}

// connectOnce dials the peer and holds the connection while it lasts; it reports whether the
// peer welcomed us.
func (s *simServer) connectOnce(ctx context.Context, link *peerLink) bool {
	dialer := net.Dialer{
		LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(s.self, 0)),
		Timeout:   handshakeTimeout,
	}
	target := netip.AddrPortFrom(link.addr, uint16(s.cfg.ServerPort)).String()
	conn, err := dialer.DialContext(ctx, "tcp", target)
	if err != nil {
		return false
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	_ = conn.SetDeadline(time.Now().Add(handshakeTimeout))
	if _, err := fmt.Fprintf(conn, "HELLO %s %s\n", s.self, s.digest); err != nil {
		return false
	}
	line, err := readLine(conn)
	if err != nil || !strings.HasPrefix(line, "WELCOME ") {
		s.log.V(2).Info("Peer refused connection", "peer", target, "answer", line)
		return false
	}
	_ = conn.SetDeadline(time.Time{})
	s.setConnected(link, true)
	_, _ = io.Copy(io.Discard, conn)
	s.setConnected(link, false)
	return true
}

// setConnected records that the outgoing connection to a peer came up or went down. A peer
// connected for the first time in this run joins the unsafe-termination marker, and may end a
// recovery.
func (s *simServer) setConnected(link *peerLink, up bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	link.connected = up
	s.log.V(1).Info("Peer connection changed", "peer", link.addr.String(), "connected", up)
	if !up || s.ctx.Err() != nil {
		return
	}
	if !s.connectedEver[link.addr] {
		s.connectedEver[link.addr] = true
		s.writeMarkerLocked()
	}
	s.checkRecoveryLocked()
}
