package imexsim

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrSessionInUse ends a run that could not take its node's IMEX session because another
// nvidia-imex holds it: the kernel lets one IMEX a node hold the session.
var ErrSessionInUse = errors.New("IMEX session of this node is held by another nvidia-imex (NV_ERR_IN_USE)")

// DefaultRecoveryTimeout is how long a simulated IMEX that recovers from an unsafe termination
// (IMEX_WAIT_FOR_QUORUM=RECOVERY) waits for the peers of the run that ended unsafely before it
// gives up on them and answers READY.
const DefaultRecoveryTimeout = 20 * time.Minute

// waitForQuorumKey and quorumRecovery: IMEX_WAIT_FOR_QUORUM=RECOVERY makes a run that finds
// the unsafe-termination marker wait for the peers of the run that left it.
const (
	waitForQuorumKey = "IMEX_WAIT_FOR_QUORUM"
	quorumRecovery   = "RECOVERY"
	// answerRecovery is the readiness query's answer while a run recovers.
	answerRecovery = "RECOVERY"
)

// heldSessions are the session lock files held by runs in this process. A flock conflicts
// between open files of one process too, but a run checks here first, so that a second run on
// a node of this process fails whatever the platform's locks do.
var heldSessions = struct {
	sync.Mutex
	paths map[string]bool
}{paths: map[string]bool{}}

// session is a node's IMEX session, held by one run.
type session struct {
	path string
	file *os.File
}

// takeSession takes the IMEX session of the node whose directory is nodeDir: an exclusive,
// non-blocking flock on SessionLockPath below it. When another run holds it, the error wraps
// ErrSessionInUse.
func takeSession(nodeDir string) (*session, error) {
	path := filepath.Join(nodeDir, SessionLockPath)
	heldSessions.Lock()
	defer heldSessions.Unlock()
	if heldSessions.paths[path] {
		return nil, fmt.Errorf("taking the IMEX session %s: %w", path, ErrSessionInUse)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("taking the IMEX session: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("taking the IMEX session: %w", err)
	}
	held, err := lockFile(f)
	if err != nil || held {
		_ = f.Close()
		if err == nil {
			err = ErrSessionInUse
		}
		return nil, fmt.Errorf("taking the IMEX session %s: %w", path, err)
	}
	// The driver may still be releasing the previous holder's memory exports (ReleasingPath).
	releasing := filepath.Join(nodeDir, ReleasingPath)
	if data, err := os.ReadFile(releasing); err == nil {
		until, perr := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(data)))
		if perr == nil && time.Now().Before(until) {
			_ = f.Close()
			return nil, fmt.Errorf("taking the IMEX session %s: the driver is releasing the previous IMEX's memory exports until %s: %w",
				path, until.Format(time.RFC3339), ErrSessionInUse)
		}
		_ = os.Remove(releasing)
	}
	heldSessions.paths[path] = true
	return &session{path: path, file: f}, nil
}

// release gives the session back: closing the file drops the flock.
func (se *session) release() {
	heldSessions.Lock()
	defer heldSessions.Unlock()
	delete(heldSessions.paths, se.path)
	_ = se.file.Close()
}

// markerHeader heads the unsafe-termination marker.
const markerHeader = "# Simulated nvidia-imex: this node's IMEX session is held, or its last holder ended unsafely.\n" +
	"# Removed on a clean stop. The peers the run was connected to, one address a line:\n"

// renderMarker renders the marker for peers.
func renderMarker(peers []netip.Addr) []byte {
	slices.SortFunc(peers, netip.Addr.Compare)
	var b bytes.Buffer
	b.WriteString(markerHeader)
	for _, p := range peers {
		b.WriteString(p.String() + "\n")
	}
	return b.Bytes()
}

// readMarker reads the marker at path: whether it exists, and the peers it lists (lines that
// are not addresses are skipped).
func readMarker(path string) (peers []netip.Addr, found bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading the unsafe-termination marker: %w", err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if addr, err := netip.ParseAddr(strings.TrimSpace(line)); err == nil {
			peers = append(peers, addr)
		}
	}
	return peers, true, nil
}

// takeSessionLocked ends the start-up phase's driver check: it takes the node's IMEX session,
// finds out whether the last holder ended unsafely (and then recovers, when the config asks to
// wait for a recovery quorum) and marks the session as held. Without a node directory there is
// no session to take. The caller holds mu.
func (s *simServer) takeSessionLocked() error {
	if s.env.nodeDir == "" {
		return nil
	}
	sess, err := takeSession(s.env.nodeDir)
	if err != nil {
		return err
	}
	s.session = sess
	marker := s.env.onNode(UnsafeMarkerPath)
	prev, unsafe, err := readMarker(marker)
	if err != nil {
		s.log.Error(err, "Reading the unsafe-termination marker failed: no recovery")
	}
	switch {
	case !unsafe:
	case s.waitForQuorum != quorumRecovery || s.recoveryTimeout <= 0:
		s.log.Info("The last IMEX of this node ended unsafely; not waiting for its peers",
			waitForQuorumKey, s.waitForQuorum, "marker", marker)
	default:
		s.recovering = true
		s.recoveryWait = map[netip.Addr]bool{}
		for _, p := range prev {
			s.recoveryWait[p] = true
		}
		s.recoveryTimer = time.AfterFunc(s.recoveryTimeout, s.recoveryTimedOut)
		s.log.Info("The last IMEX of this node ended unsafely: recovering, waiting for its peers",
			"peers", len(prev), "timeout", s.recoveryTimeout.String(), "marker", marker)
	}
	s.writeMarkerLocked()
	return nil
}

// writeMarkerLocked writes the unsafe-termination marker: the peers connected in this run, and
// while recovering those of the run that ended unsafely. It does nothing unless the run holds
// the session. The caller holds mu.
func (s *simServer) writeMarkerLocked() {
	if s.session == nil {
		return
	}
	peers := make([]netip.Addr, 0, len(s.connectedEver)+len(s.recoveryWait))
	for addr := range s.connectedEver {
		peers = append(peers, addr)
	}
	for addr := range s.recoveryWait {
		if !s.connectedEver[addr] {
			peers = append(peers, addr)
		}
	}
	path := s.env.onNode(UnsafeMarkerPath)
	if err := replaceFile(path, renderMarker(peers)); err != nil {
		s.log.Error(err, "Writing the unsafe-termination marker failed", "marker", path)
	}
}

// replaceFile makes path hold data through a temporary file renamed over it, so that a run
// killed meanwhile leaves the old content or the new. It does not sync: the marker has to
// outlive a process, not the machine, and thousands of runs share one machine.
func replaceFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("replacing %s: %w", path, err)
	}
	return nil
}

// releaseSession gives the session back at the end of a run; a clean stop (result nil) first
// removes the unsafe-termination marker, anything else leaves it.
func (s *simServer) releaseSession(result error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.session == nil {
		return
	}
	if result == nil {
		if err := os.Remove(s.env.onNode(UnsafeMarkerPath)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Error(err, "Removing the unsafe-termination marker failed")
		}
	}
	s.session.release()
	s.session = nil
}

// recoveryPendingLocked lists the peers the run still waits for while recovering: those of the
// run that ended unsafely that are peers of its node list now and have no outgoing connection
// up. The caller holds mu.
func (s *simServer) recoveryPendingLocked() []netip.Addr {
	var pending []netip.Addr
	peers := s.peerSetLocked()
	for addr := range s.recoveryWait {
		if link := s.links[addr]; peers[addr] && (link == nil || !link.connected) {
			pending = append(pending, addr)
		}
	}
	slices.SortFunc(pending, netip.Addr.Compare)
	return pending
}

// checkRecoveryLocked ends the recovery once every peer it waits for is connected. The caller
// holds mu.
func (s *simServer) checkRecoveryLocked() {
	if s.recovering && len(s.recoveryPendingLocked()) == 0 {
		s.endRecoveryLocked("connected to every peer of the run that ended unsafely")
	}
}

// recoveryTimedOut ends the recovery when DefaultRecoveryTimeout has passed.
func (s *simServer) recoveryTimedOut() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recovering && s.ctx.Err() == nil {
		s.endRecoveryLocked("recovery timeout: gave up on " + fmt.Sprint(s.recoveryPendingLocked()))
	}
}

// endRecoveryLocked makes the run READY and clears the recovery from the marker. The caller
// holds mu.
func (s *simServer) endRecoveryLocked(why string) {
	s.recovering = false
	s.recoveryWait = nil
	if s.recoveryTimer != nil {
		s.recoveryTimer.Stop()
		s.recoveryTimer = nil
	}
	s.writeMarkerLocked()
	s.log.Info("Recovery over: ready", "reason", why)
}
