package imexsim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
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
	// minLinkBackoff and maxLinkBackoff bound the wait between attempts to reach a peer. The
	// real IMEX retries far less often; the simulation favours quick convergence.
	minLinkBackoff = 20 * time.Millisecond
	maxLinkBackoff = 500 * time.Millisecond
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
// Its own address is BIND_INTERFACE_IP, or, when that is empty, the one node list entry whose
// address is local (LocalAddrsEnv), fixed at start. Names of the node list go through the
// system resolver as glibc's: the hosts file, then DNS for the names it does not map, every
// candidate of the resolv.conf search (ResolvConfEnv) one simulated lookup that fails
// (Status.DNSLookups, DNSLookups); unresolved names are tried again every dnsRetryInterval.
// With a node directory (NodeDirEnv) it refuses host names on a driver older than
// MinHostnameDriverVersion, takes the node's IMEX session at the end of its start-up phase
// (ErrSessionInUse when another run holds it), marks the session unsafe while it runs, and
// recovers from an unsafe termination (IMEX_WAIT_FOR_QUORUM=RECOVERY): not READY until its
// peers of the unsafe run are connected again or recoveryTimeout passes.
//
// Peer protocol on its own address and SERVER_PORT: the dialling side connects from its own
// address and sends "HELLO <its address> <node list digest>" (nodeListDigest of the entries as
// written in nodes.cfg); the listening side answers "WELCOME <its address>" when the address
// matches the connection's source, is in its node list and the digests match, "REJECT <why>"
// otherwise ("REJECT node list differs" for another node list: IMEX daemons accept each other
// when their node lists are the same, whichever ComputeDomain they serve), and both keep the
// connection open until one side goes away.
type simServer struct {
	log        logr.Logger
	configPath string
	hostsPath  string
	env        standIns
	// startupPhase, reloadInterval, dnsRetryInterval and recoveryTimeout are
	// DefaultStartupPhase, DefaultReloadInterval, DefaultDNSRetryInterval and
	// DefaultRecoveryTimeout unless set before start; now is the clock the reload interval is
	// measured on.
	startupPhase     time.Duration
	reloadInterval   time.Duration
	dnsRetryInterval time.Duration
	recoveryTimeout  time.Duration
	now              func() time.Time
	// beforeStarted, when set, runs at the end of the start-up phase, before the daemon
	// connects and answers READY: Main installs its SIGUSR1 handler there.
	beforeStarted func()

	cfg           imex.DaemonConfig // fixed after start, like the real daemon's
	waitForQuorum string            // IMEX_WAIT_FOR_QUORUM
	nodesData     []byte            // nodes.cfg as read at start: the node list is fixed too
	digest        string            // nodeListDigest of the node list read at start
	self          netip.Addr
	peerLn        net.Listener
	cmdLns        []net.Listener // TCP and Unix domain socket; none when the command service is off
	ctx           context.Context
	cancel        context.CancelFunc
	wg            sync.WaitGroup

	mu             sync.Mutex
	started        bool // the start-up phase is over
	nodes          []imex.Node
	links          map[netip.Addr]*peerLink
	inbound        map[net.Conn]netip.Addr
	reloads        int       // honoured reloads, failed ones included
	ignoredReloads int       // reloads within reloadInterval of the last honoured one
	lastReload     time.Time // when the last honoured reload came, on now's clock
	lastReloadErr  string
	dnsLookups     int            // simulated DNS lookups of this run
	rejected       map[string]int // refused handshakes by reason
	retryTimer     *time.Timer    // the next retry of the unresolved names, if scheduled
	// session is the node's IMEX session, held from the end of the start-up phase; nil
	// without a node directory. connectedEver are the peers connected in this run (the
	// marker lists them). While recovering, recoveryWait are the peers of the run that ended
	// unsafely, and recoveryTimer ends the wait.
	session       *session
	connectedEver map[netip.Addr]bool
	recovering    bool
	recoveryWait  map[netip.Addr]bool
	recoveryTimer *time.Timer

	endOnce   sync.Once
	endCh     chan struct{} // closed by the first of stop, crash and kill
	endReason error         // how the run ends: nil (stop), ErrCrashed or ErrKilledBySignal
	done      chan struct{} // closed after teardown, once result is set
	result    error
}

// newSimServer returns a daemon for the imexd config at configPath that resolves names through
// hostsPath (default: env's hosts file, else /etc/hosts).
func newSimServer(configPath, hostsPath string, env standIns, log logr.Logger) *simServer {
	if hostsPath == "" {
		hostsPath = env.hostsFile
	}
	if hostsPath == "" {
		hostsPath = "/etc/hosts"
	}
	return &simServer{
		log:              log,
		configPath:       configPath,
		hostsPath:        hostsPath,
		env:              env,
		startupPhase:     DefaultStartupPhase,
		reloadInterval:   DefaultReloadInterval,
		dnsRetryInterval: DefaultDNSRetryInterval,
		recoveryTimeout:  DefaultRecoveryTimeout,
		now:              time.Now,
		links:            map[netip.Addr]*peerLink{},
		inbound:          map[net.Conn]netip.Addr{},
		rejected:         map[string]int{},
		connectedEver:    map[netip.Addr]bool{},
		endCh:            make(chan struct{}),
		done:             make(chan struct{}),
	}
}

// start reads the configuration and binds the listeners, then leaves the start-up phase to
// run; when it is over the daemon answers its command service and peers and dials its peers.
// A configuration the real daemon refuses, or a listener that cannot be bound, fails start
// (the real daemon binds after its checks; the simulation binds first so that its caller gets
// the error); on error nothing is left running.
func (s *simServer) start() error {
	// A containerized IMEX: the loader finds its libraries before it runs, and the driver's
	// devices are opened once the configuration is read.
	if err := s.checkLibraries(); err != nil {
		return err
	}
	data, err := os.ReadFile(s.configPath)
	if err != nil {
		return fmt.Errorf("reading IMEX config: %w", err)
	}
	cfg, err := imex.ParseIMEXConfig(s.configPath, data)
	if err != nil {
		return err
	}
	s.cfg, s.waitForQuorum = cfg, configValue(data, waitForQuorumKey)
	if err := s.checkDevices(); err != nil {
		return err
	}
	if !cfg.BindIP.IsValid() && !s.env.localAddrsSet {
		return &imex.ConfigError{File: s.configPath, Reason: "BIND_INTERFACE_IP is empty, and the simulated IMEX " +
			"can find its own node list entry only among this host's addresses, which it is told through " +
			LocalAddrsEnv + " (all of 127/8 is local on this machine); set BIND_INTERFACE_IP or " + LocalAddrsEnv}
	}
	if s.nodesData, err = os.ReadFile(cfg.NodesConfigPath); err != nil {
		return fmt.Errorf("reading node config: %w", err)
	}
	nodes, err := s.resolveAtStart()
	if err != nil {
		return err
	}
	s.log = s.log.WithValues("self", s.self.String())
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

// resolveAtStart resolves the node list read at start: the hosts file, the driver's support for
// names, DNS for the names the hosts file does not map; then it fixes this node's own address
// and checks that the node list holds it.
func (s *simServer) resolveAtStart() ([]imex.Node, error) {
	nodes, err := s.mapNodes()
	if err != nil {
		return nil, err
	}
	if err := s.checkDriverForNames(nodes); err != nil {
		return nil, err
	}
	s.lookUpLocked(unresolved(nodes)) // nothing runs yet
	s.self = s.cfg.BindIP
	if !s.self.IsValid() {
		if s.self, err = s.ownAddress(nodes); err != nil {
			return nil, err
		}
	}
	if err := s.checkListed(nodes); err != nil {
		return nil, err
	}
	s.digest = nodeListDigest(nodes)
	return nodes, nil
}

// ownAddress is what the real IMEX takes as its address when BIND_INTERFACE_IP is empty: the
// address of the node list entry that is one of this host's (LocalAddrsEnv). None, or more
// than one, is a *imex.ConfigError.
func (s *simServer) ownAddress(nodes []imex.Node) (netip.Addr, error) {
	var own []imex.Node
	for _, n := range nodes {
		if n.Addr.IsValid() && slices.Contains(s.env.localAddrs, n.Addr) {
			own = append(own, n)
		}
	}
	switch len(own) {
	case 1:
		return own[0].Addr, nil
	case 0:
		return netip.Addr{}, &imex.ConfigError{File: s.cfg.NodesConfigPath, Reason: fmt.Sprintf(
			"none of the node list's addresses is local (BIND_INTERFACE_IP is empty; this host's addresses: %v); "+
				"is this node's name missing from %s?", s.env.localAddrs, s.hostsPath)}
	}
	return netip.Addr{}, &imex.ConfigError{File: s.cfg.NodesConfigPath, Line: own[1].Line, Text: own[1].Entry,
		Reason: fmt.Sprintf("resolves to %s, a local address like line %d's (%s): with BIND_INTERFACE_IP empty "+
			"IMEX cannot tell which entry is its own", own[1].Addr, own[0].Line, own[0].Addr)}
}

// checkListed checks that this node's address is in nodes.
func (s *simServer) checkListed(nodes []imex.Node) error {
	if !slices.ContainsFunc(nodes, func(n imex.Node) bool { return n.Addr == s.self }) {
		return &imex.ConfigError{File: s.cfg.NodesConfigPath, Reason: fmt.Sprintf(
			"this node's address %s is not in the node list (is its name missing from %s?)", s.self, s.hostsPath)}
	}
	return nil
}

// configValue is the value of key in an imexd config that ParseIMEXConfig accepted; empty when
// the key is not set.
func configValue(data []byte, key string) string {
	for line := range strings.SplitSeq(string(data), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok && !strings.HasPrefix(k, "#") && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
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
	nodes, err := s.mapNodes()
	if err == nil {
		s.lookUpLocked(unresolved(nodes))
		err = s.checkListed(nodes)
	}
	if err != nil {
		s.lastReloadErr = err.Error()
		return fmt.Errorf("reloading simulated IMEX: %w", err)
	}
	s.lastReloadErr = ""
	s.nodes = nodes
	s.applyNodesLocked()
	s.checkRecoveryLocked()
	s.armRetryLocked()
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
// peers start, links to and connections from removed peers end (and leave the marker's peers).
func (s *simServer) applyNodesLocked() {
	want := s.peerSetLocked()
	forgot := false // a peer left the node list: the marker lists it no more
	for addr, link := range s.links {
		if !want[addr] {
			link.cancel()
			delete(s.links, addr)
		}
	}
	for addr := range s.connectedEver {
		if !want[addr] {
			delete(s.connectedEver, addr)
			forgot = true
		}
	}
	if forgot {
		s.writeMarkerLocked()
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

// finishStartup ends the start-up phase: the daemon's driver check takes the node's IMEX
// session (the run ends when another holds it), then the daemon installs its SIGUSR1 handler,
// answers and dials its peers.
func (s *simServer) finishStartup() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if isClosed(s.endCh) {
		return // killed or stopped meanwhile
	}
	if err := s.takeSessionLocked(); err != nil {
		s.log.Info("Start-up checks failed", "err", err.Error())
		s.end(err)
		return
	}
	// Under mu: a reload that the handler lets through waits for started.
	if s.beforeStarted != nil {
		s.beforeStarted()
	}
	s.started = true
	s.applyNodesLocked()
	s.checkRecoveryLocked()
	s.armRetryLocked()
	s.log.Info("Simulated IMEX started", "address", s.peerLn.Addr().String(), "peers", len(s.links),
		"recovering", s.recovering)
}

// teardown ends everything the run started, gives the node's IMEX session back and closes done
// with result.
func (s *simServer) teardown(result error) {
	s.mu.Lock()
	s.cancel() // under mu, so applyNodesLocked starts no link after this
	for _, t := range []*time.Timer{s.retryTimer, s.recoveryTimer} {
		if t != nil {
			t.Stop()
		}
	}
	s.mu.Unlock()
	_ = s.peerLn.Close()
	for _, ln := range s.cmdLns {
		_ = ln.Close() // a Unix domain socket's file goes with it
	}
	s.wg.Wait()
	if result == nil {
		s.releaseExports()
	}
	s.releaseSession(result)
	s.result = result
	if result != nil {
		s.log.Info("Simulated IMEX ended abruptly", "address", s.peerLn.Addr().String(), "reason", result.Error())
	} else {
		s.log.Info("Simulated IMEX stopped", "address", s.peerLn.Addr().String())
	}
	close(s.done)
}

// releaseExports is the end of a clean stop: the driver releases a real IMEX's memory exports
// after the process has gone, and keeps the node's IMEX session until it has. The run records
// when that will be (ReleasingPath, now plus the shutdown delay, ShutdownDelayEnv) before it
// gives the session back and ends at once, so that its pod ends as a real daemon pod does, and
// an IMEX started on the node before then fails with ErrSessionInUse (takeSession). A run that
// holds no session has nothing to release.
func (s *simServer) releaseExports() {
	s.mu.Lock()
	held := s.session != nil
	s.mu.Unlock()
	d := s.env.stopDelay()
	if !held || d <= 0 {
		return
	}
	until := time.Now().Add(d) // read by other processes: the wall clock
	s.log.Info("The driver releases this IMEX's memory exports after it ends; the node's IMEX session stays held until then",
		"delay", d.String(), "until", until.Format(time.RFC3339Nano))
	if err := replaceFile(s.env.onNode(ReleasingPath), []byte(until.Format(time.RFC3339Nano)+"\n")); err != nil {
		s.log.Error(err, "Recording the release of the memory exports failed")
	}
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

// isRecovering reports whether the run recovers from an unsafe termination.
func (s *simServer) isRecovering() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recovering
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

// status reports what the command service's STATUS answers.
func (s *simServer) status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{
		Ready:           !s.recovering,
		Recovering:      s.recovering,
		Address:         s.peerLn.Addr().String(),
		Peers:           []string{},
		Connected:       []string{},
		Inbound:         []string{},
		Reloads:         s.reloads,
		IgnoredReloads:  s.ignoredReloads,
		LastReloadError: s.lastReloadErr,
		DNSLookups:      s.dnsLookups,
	}
	for reason, n := range s.rejected {
		if st.RejectedPeersByReason == nil {
			st.RejectedPeersByReason = map[string]int{}
		}
		st.RejectedPeersByReason[reason] = n
		st.RejectedPeers += n
	}
	for _, addr := range s.recoveryPendingLocked() {
		st.RecoveryWaitingFor = append(st.RecoveryWaitingFor, addr.String())
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
