package imexsim

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"cdplane/internal/imex"
)

// DefaultDNSRetryInterval is how often a simulated IMEX tries again to resolve the names of its
// node list that did not resolve, through the hosts file and then DNS, as the real one keeps
// trying to reach the nodes it could not resolve.
const DefaultDNSRetryInterval = 5 * time.Second

// maxNdots is glibc's cap on options ndots (RES_MAXNDOTS).
const maxNdots = 15

// dnsLookups counts the simulated DNS lookups of every simulated IMEX in this process.
var dnsLookups atomic.Int64

// DNSLookups is how many simulated DNS lookups the simulated IMEX daemons of this process have
// made: each candidate name the system resolver would send to DNS for a node list name that the
// hosts file does not map counts one. The simulated cluster DNS knows no IMEX name, so every
// lookup fails.
func DNSLookups() int64 { return dnsLookups.Load() }

// resolvConf is what a resolver takes from resolv.conf for a search: the search list and ndots.
type resolvConf struct {
	search []string
	ndots  int
}

// defaultResolvConf is glibc's behaviour without a resolv.conf: ndots 1, no search list (the
// local domain, which glibc derives from the host name, is left out).
var defaultResolvConf = resolvConf{ndots: 1}

// parseResolvConf reads resolv.conf as glibc does: the last "search" or "domain" line sets the
// search list, "options ndots:N" sets ndots (capped at 15); comments start with # or ;, and
// what it does not understand is skipped.
func parseResolvConf(data []byte) resolvConf {
	rc := defaultResolvConf
	for line := range strings.SplitSeq(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") || strings.HasPrefix(fields[0], ";") {
			continue
		}
		switch fields[0] {
		case "search":
			rc.search = withoutComment(fields[1:])
		case "domain":
			rc.search = withoutComment(fields[1:2])
		case "options":
			for _, opt := range fields[1:] {
				v, ok := strings.CutPrefix(opt, "ndots:")
				if n, err := strconv.Atoi(v); ok && err == nil && n >= 0 {
					rc.ndots = min(n, maxNdots)
				}
			}
		}
	}
	return rc
}

// withoutComment drops the fields from the first that starts a comment.
func withoutComment(fields []string) []string {
	var out []string
	for _, f := range fields {
		if strings.HasPrefix(f, "#") || strings.HasPrefix(f, ";") {
			break
		}
		out = append(out, f)
	}
	return out
}

// readResolvConf reads the resolv.conf at path; empty, missing or unreadable, it is glibc's
// defaults.
func readResolvConf(path string) resolvConf {
	if path == "" {
		return defaultResolvConf
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return defaultResolvConf
	}
	return parseResolvConf(data)
}

// candidates are the names glibc's res_search sends to DNS for name, in order, when each of
// them fails: with fewer dots than ndots the name with each search suffix first, then the name
// as it is; otherwise the name as it is first, then with each suffix. An absolute name (a
// trailing dot) is tried as it is only.
func (rc resolvConf) candidates(name string) []string {
	if strings.HasSuffix(name, ".") {
		return []string{name}
	}
	out := make([]string, 0, len(rc.search)+1)
	asIs := strings.Count(name, ".") >= rc.ndots
	if asIs {
		out = append(out, name)
	}
	for _, s := range rc.search {
		out = append(out, name+"."+strings.TrimSuffix(s, "."))
	}
	if !asIs {
		out = append(out, name)
	}
	return out
}

// readHosts reads the hosts file; a missing one maps nothing.
func (s *simServer) readHosts() ([]byte, error) {
	data, err := os.ReadFile(s.hostsPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading hosts file: %w", err)
	}
	return data, nil
}

// mapNodes resolves the node list read at start through the hosts file, as it is now; names it
// does not map get the zero Addr. It makes no DNS lookup.
func (s *simServer) mapNodes() ([]imex.Node, error) {
	hostsData, err := s.readHosts()
	if err != nil {
		return nil, err
	}
	return imex.ParseNodes(s.cfg.NodesConfigPath, s.nodesData, s.hostsPath, hostsData)
}

// lookUpLocked makes the simulated DNS lookups for names, which the hosts file does not map:
// every candidate the resolver tries counts one, and every one fails. The caller holds mu, or
// the run has not started.
func (s *simServer) lookUpLocked(names []string) {
	if len(names) == 0 {
		return
	}
	rc := readResolvConf(s.env.resolvConf) // glibc reloads a changed resolv.conf
	n := 0
	for _, name := range names {
		c := rc.candidates(name)
		n += len(c)
		s.log.V(3).Info("Simulated DNS lookup failed", "name", name, "tried", c)
	}
	s.dnsLookups += n
	dnsLookups.Add(int64(n))
}

// unresolved lists the entries of nodes that have no address.
func unresolved(nodes []imex.Node) []string {
	var out []string
	for _, n := range nodes {
		if !n.Addr.IsValid() {
			out = append(out, n.Entry)
		}
	}
	return out
}

// armRetryLocked schedules the next resolution of the node list's unresolved names, unless
// there are none, one is scheduled, retries are off or the run is ending. The caller holds mu.
func (s *simServer) armRetryLocked() {
	if s.retryTimer != nil || s.dnsRetryInterval <= 0 || s.ctx.Err() != nil || len(unresolved(s.nodes)) == 0 {
		return
	}
	s.retryTimer = time.AfterFunc(s.dnsRetryInterval, s.retryUnresolved)
}

// retryUnresolved resolves the names of the node list that did not resolve again, as the real
// IMEX retries the nodes it could not reach: through the hosts file as it is now (glibc reads
// /etc/hosts on every lookup), then DNS for those still unmapped. A name that resolves joins
// the peers; names that resolved before keep their address until a reload. A hosts file the
// parser refuses maps nothing this time.
func (s *simServer) retryUnresolved() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retryTimer = nil
	if s.ctx.Err() != nil {
		return
	}
	fresh, err := s.mapNodes()
	if err != nil {
		s.log.V(1).Info("Retrying the unresolved names: the hosts file was refused", "err", err.Error())
		fresh = nil
	}
	var names []string
	resolved := 0
	for i, n := range s.nodes {
		if n.Addr.IsValid() {
			continue
		}
		if i < len(fresh) && fresh[i].Addr.IsValid() {
			s.nodes[i].Addr = fresh[i].Addr
			resolved++
			continue
		}
		names = append(names, n.Entry)
	}
	s.lookUpLocked(names)
	if resolved > 0 {
		s.log.V(1).Info("Resolved names of the node list on a retry", "resolved", resolved, "unresolved", len(names))
		s.applyNodesLocked()
		s.checkRecoveryLocked()
	}
	s.armRetryLocked()
}
