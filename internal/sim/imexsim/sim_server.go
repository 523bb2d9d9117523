package imexsim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"cdplane/internal/imex"
)

const (
	// handshakeTimeout bounds the peer handshake and one command exchange.
	handshakeTimeout = 2 * time.Second
	// linkBackoffMin and linkBackoffMax bound the wait between attempts to reach a peer. The
	// real IMEX retries far less often; the simulation favours quick convergence.
	linkBackoffMin = 20 * time.Millisecond
	linkBackoffMax = 500 * time.Millisecond
	// maxLine bounds a protocol line.
	maxLine = 512

	// DefaultStartupPhase is how long a simulated IMEX spends on its start-up checks (the real
	// one checks the driver) before it listens, connects and answers the readiness query. A
	// reload (SIGUSR1) during it kills the run: the real daemon has not installed its handler
	// yet.
	DefaultStartupPhase = 500 * time.Millisecond
	// DefaultReloadInterval is the least time between two reloads a simulated IMEX honours, as
	// the real one honours SIGUSR1 at most once every 5 seconds; a reload sooner after the last
	// honoured one is ignored.
	DefaultReloadInterval = 5 * time.Second
)

// simServer is one simulated IMEX daemon: the part both the in-process Sim and Main run.
//
// Like the real daemon it reads its configuration (the imexd config, nodes.cfg and the names in
// the hosts file) once, at start; a reload re-reads only the hosts file, to resolve the names of
// the node list read at start again, and reconnects. After start it spends startupPhase on its
// start-up checks; during them every connection, a peer's or a command's, is closed without an
// answer and a reload kills the run (ErrKilledBySignal).
//
// imex.Peer protocol on BIND_INTERFACE_IP:SERVER_PORT: the dialling side connects from its own
// address and sends "HELLO <its address>"; the listening side answers "WELCOME <its address>"
// when the address matches the connection's source and is in its node list, "REJECT <why>"
// otherwise, and both keep the connection open until one side goes away.
type simServer struct {
	log        logr.Logger
	configPath string
	hostsPath  string
	// startupPhase and reloadInterval are DefaultStartupPhase and DefaultReloadInterval unless
	// set before start; now is the clock the reload interval is measured on.
	startupPhase   time.Duration
	reloadInterval time.Duration
	now            func() time.Time
	// beforeStarted, when set, runs at the end of the start-up phase, before the daemon
	// connects and answers READY: Main installs its SIGUSR1 handler there.
	beforeStarted func()

	cfg       imex.DaemonConfig // fixed after start, like the real daemon's
	nodesData []byte            // nodes.cfg as read at start: the node list is fixed too
	self      netip.Addr
	peerLn    net.Listener
	cmdLns    []net.Listener // TCP and Unix domain socket; none when the command service is off
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	mu             sync.Mutex
	started        bool // the start-up phase is over
	nodes          []imex.Node
	links          map[netip.Addr]*peerLink
	inbound        map[net.Conn]netip.Addr
	reloads        int       // honoured reloads, failed ones included
	ignoredReloads int       // reloads within reloadInterval of the last honoured one
	lastReload     time.Time // when the last honoured reload came, on now's clock
	lastReloadErr  string

	endOnce   sync.Once
	endCh     chan struct{} // closed by the first of stop, crash and kill
	endReason error         // how the run ends: nil (stop), ErrCrashed or ErrKilledBySignal
	done      chan struct{} // closed after teardown, once result is set
	result    error
}

// peerLink is the outgoing connection to one peer, kept up by runLink.
type peerLink struct {
	addr      netip.Addr
	cancel    context.CancelFunc
	connected bool // guarded by simServer.mu
}

func newSimServer(configPath, hostsPath string, log logr.Logger) *simServer {
	if hostsPath == "" {
		hostsPath = "/etc/hosts"
	}
	return &simServer{
		log:            log,
		configPath:     configPath,
		hostsPath:      hostsPath,
		startupPhase:   DefaultStartupPhase,
		reloadInterval: DefaultReloadInterval,
		now:            time.Now,
		links:          map[netip.Addr]*peerLink{},
		inbound:        map[net.Conn]netip.Addr{},
		endCh:          make(chan struct{}),
		done:           make(chan struct{}),
	}
}

// start reads the configuration and binds the listeners, then leaves the start-up phase to
// run; when it is over the daemon answers its command service and peers and dials its peers.
// A configuration the real daemon refuses, or a listener that cannot be bound, fails start
// (the real daemon binds after its checks; the simulation binds first so that its caller gets
// the error); on error nothing is left running.
func (s *simServer) start() error {
	cfg, err := imex.ReadIMEXConfig(s.configPath)
	if err != nil {
		return err
	}
	if !cfg.BindIP.IsValid() {
		return &imex.ConfigError{File: s.configPath, Reason: "BIND_INTERFACE_IP must be set: the " +
			"simulated IMEX cannot pick its address by matching local interfaces (all of 127/8 is local)"}
	}
	s.cfg, s.self = cfg, cfg.BindIP
	s.log = s.log.WithValues("self", s.self.String())
	if s.nodesData, err = os.ReadFile(cfg.NodesConfigPath); err != nil {
		return fmt.Errorf("reading node config: %w", err)
	}
	nodes, err := s.resolveNodes()
	if err != nil {
		return err
	}
	s.peerLn, err = net.Listen("tcp", netip.AddrPortFrom(s.self, uint16(cfg.ServerPort)).String())
	if err != nil {
		return fmt.Errorf("listening for peers: %w", err)
	}
	if cfg.CmdEnabled {
		if s.cmdLns, err = s.listenCmd(); err != nil {
			_ = s.peerLn.Close()
			return err
		}
	}
	s.nodes = nodes // no link starts before the start-up phase is over
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.acceptLoop(s.peerLn, s.servePeer)
	for _, ln := range s.cmdLns {
		s.wg.Add(1)
		go s.acceptLoop(ln, s.serveCmd)
	}
	s.log.Info("Simulated IMEX starting up", "address", s.peerLn.Addr().String(), "nodes", len(nodes),
		"commandSocket", cfg.CmdUnixPath, "startupPhase", s.startupPhase.String())
	go s.lifecycle()
	return nil
}

// resolveNodes reads the hosts file, resolves the names of the node list read at start through
// it and checks that this node is listed.
func (s *simServer) resolveNodes() ([]imex.Node, error) {
	hostsData, err := os.ReadFile(s.hostsPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading hosts file: %w", err)
	}
	nodes, err := imex.ParseNodes(s.cfg.NodesConfigPath, s.nodesData, s.hostsPath, hostsData)
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(nodes, func(n imex.Node) bool { return n.Addr == s.self }) {
		return nil, &imex.ConfigError{File: s.cfg.NodesConfigPath, Reason: fmt.Sprintf(
			"this node's address %s is not in the node list (is its name missing from %s?)", s.self, s.hostsPath)}
	}
	return nodes, nil
}

// reload is what SIGUSR1 does to the real daemon. During the start-up phase it kills the run
// (ErrKilledBySignal, also returned). Within reloadInterval of the last honoured reload it is
// ignored: it changes nothing, is counted and returns nil. Otherwise it re-reads the hosts
// file, resolves the names of the node list read at start again and reconciles the peer
// connections; a hosts file the parser refuses keeps the previous resolution and is returned.
func (s *simServer) reload() error {
	if isClosed(s.done) {
		return imex.ErrNotRunning
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		s.log.Info("Reload during the start-up phase, before the SIGUSR1 handler was installed: killed")
		s.end(ErrKilledBySignal)
		return fmt.Errorf("reloading simulated IMEX: %w", ErrKilledBySignal)
	}
	now := s.now()
	if s.reloads > 0 && now.Sub(s.lastReload) < s.reloadInterval {
		s.ignoredReloads++
		s.log.V(1).Info("Ignored reload: too soon after the last honoured one", "interval", s.reloadInterval.String(),
			"sinceLast", now.Sub(s.lastReload).String(), "ignoredReloads", s.ignoredReloads)
		return nil
	}
	s.reloads++
	s.lastReload = now
	// Read under mu: reloads apply in the order they were honoured.
	nodes, err := s.resolveNodes()
	if err != nil {
		s.lastReloadErr = err.Error()
		return fmt.Errorf("reloading simulated IMEX: %w", err)
	}
	s.lastReloadErr = ""
	s.nodes = nodes
	s.applyNodesLocked()
	s.log.V(1).Info("Reloaded: resolved the node list's names again", "nodes", len(nodes), "peers", len(s.links))
	return nil
}

// peerSetLocked is the set of peer addresses in the node list, without this node.
func (s *simServer) peerSetLocked() map[netip.Addr]bool {
	set := map[netip.Addr]bool{}
	for _, n := range s.nodes {
		if n.Addr.IsValid() && n.Addr != s.self {
			set[n.Addr] = true
		}
	}
	return set
}

// applyNodesLocked makes the links and inbound connections match the node list: links to new
// peers start, links to and connections from removed peers end.
func (s *simServer) applyNodesLocked() {
	want := s.peerSetLocked()
	for addr, link := range s.links {
		if !want[addr] {
			link.cancel()
			delete(s.links, addr)
		}
	}
	for conn, addr := range s.inbound {
		if !want[addr] {
			_ = conn.Close()
		}
	}
	if s.ctx.Err() != nil {
		return // tearing down: start nothing new
	}
	for addr := range want {
		if _, ok := s.links[addr]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(s.ctx)
		link := &peerLink{addr: addr, cancel: cancel}
		s.links[addr] = link
		s.wg.Add(1)
		go s.runLink(ctx, link)
	}
}

// lifecycle runs the start-up phase, then waits for the end of the run and tears everything
// down.
func (s *simServer) lifecycle() {
	timer := time.NewTimer(s.startupPhase)
	select {
	case <-timer.C:
		s.finishStartup()
	case <-s.endCh:
		timer.Stop()
	}
	<-s.endCh
	s.teardown(s.endReason) // set before endCh was closed
}

// finishStartup ends the start-up phase: the daemon installs its SIGUSR1 handler, then answers
// and dials its peers.
func (s *simServer) finishStartup() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if isClosed(s.endCh) {
		return // killed or stopped meanwhile
	}
	// Under mu: a reload that the handler lets through waits for started.
	if s.beforeStarted != nil {
		s.beforeStarted()
	}
	s.started = true
	s.applyNodesLocked()
	s.log.Info("Simulated IMEX started", "address", s.peerLn.Addr().String(), "peers", len(s.links))
}

// teardown ends everything the run started and closes done with result.
func (s *simServer) teardown(result error) {
	s.mu.Lock()
	s.cancel() // under mu, so applyNodesLocked starts no link after this
	s.mu.Unlock()
	_ = s.peerLn.Close()
	for _, ln := range s.cmdLns {
		_ = ln.Close() // a Unix domain socket's file goes with it
	}
	s.wg.Wait()
	s.result = result
	if result != nil {
		s.log.Info("Simulated IMEX ended abruptly", "address", s.peerLn.Addr().String(), "reason", result.Error())
	} else {
		s.log.Info("Simulated IMEX stopped", "address", s.peerLn.Addr().String())
	}
	close(s.done)
}

// stop asks for a clean shutdown; crash for an abrupt one. Both return at once; done closes
// when everything has ended. The first of stop, crash and end decides how the run ends.
func (s *simServer) stop()  { s.end(nil) }
func (s *simServer) crash() { s.end(ErrCrashed) }

// end ends the run with reason (nil: a clean stop). The caller may hold mu.
func (s *simServer) end(reason error) {
	s.endOnce.Do(func() {
		s.endReason = reason // read by lifecycle only after endCh is closed
		close(s.endCh)
	})
}

// isStarted reports whether the start-up phase is over.
func (s *simServer) isStarted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// acceptLoop serves ln until it is closed.
func (s *simServer) acceptLoop(ln net.Listener, handle func(net.Conn)) {
	defer s.wg.Done()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Error(err, "Accept failed", "address", ln.Addr().String())
			}
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer conn.Close()
			stop := context.AfterFunc(s.ctx, func() { _ = conn.Close() })
			defer stop()
			handle(conn)
		}()
	}
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
	claimed, err := netip.ParseAddr(strings.TrimPrefix(line, "HELLO "))
	if !strings.HasPrefix(line, "HELLO ") || err != nil || claimed != remote {
		fmt.Fprintf(conn, "REJECT bad hello %q from %s\n", line, remote)
		return
	}
	s.mu.Lock()
	member := s.peerSetLocked()[remote]
	if member {
		s.inbound[conn] = remote
	}
	s.mu.Unlock()
	if !member {
		fmt.Fprintf(conn, "REJECT %s is not in the node list of %s\n", remote, s.self)
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

// runLink keeps a connection to one peer up, retrying with backoff, until ctx ends.
func (s *simServer) runLink(ctx context.Context, link *peerLink) {
	defer s.wg.Done()
	backoff := linkBackoffMin
	for ctx.Err() == nil {
		if s.connectOnce(ctx, link) {
			backoff = linkBackoffMin
		}
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		timer.Stop()
		backoff = min(2*backoff, linkBackoffMax)
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
	if _, err := fmt.Fprintf(conn, "HELLO %s\n", s.self); err != nil {
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

func (s *simServer) setConnected(link *peerLink, up bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	link.connected = up
	s.log.V(1).Info("Peer connection changed", "peer", link.addr.String(), "connected", up)
}

// status reports what the command service's STATUS answers.
func (s *simServer) status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{
		Ready:           true,
		Address:         s.peerLn.Addr().String(),
		Peers:           []string{},
		Connected:       []string{},
		Inbound:         []string{},
		Reloads:         s.reloads,
		IgnoredReloads:  s.ignoredReloads,
		LastReloadError: s.lastReloadErr,
	}
	for _, n := range s.nodes {
		switch {
		case !n.Addr.IsValid():
			st.Unresolved = append(st.Unresolved, n.Entry)
		case n.Addr != s.self:
			st.Peers = append(st.Peers, n.Addr.String())
		}
	}
	for addr, link := range s.links {
		if link.connected {
			st.Connected = append(st.Connected, addr.String())
		}
	}
	for _, addr := range s.inbound {
		st.Inbound = append(st.Inbound, addr.String())
	}
	for _, list := range [][]string{st.Peers, st.Connected, st.Inbound} {
		slices.SortFunc(list, compareAddrs)
	}
	st.Inbound = slices.Compact(st.Inbound)
	return st
}

func compareAddrs(a, b string) int {
	return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b))
}

// readLine reads one protocol line of at most maxLine bytes, without its terminator.
func readLine(r io.Reader) (string, error) {
	br := bufio.NewReaderSize(io.LimitReader(r, maxLine), 64)
	line, err := br.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("reading line: %w", err)
	}
	return strings.TrimSpace(line), nil
}
