package daemon

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"cdplane/internal/imex"
)

// skippedPeer is a clique entry left out of IMEX's configuration, and why.
type skippedPeer struct {
	NodeName string
	Reason   string
}

// usablePeers returns the entries of peers that IMEX can be configured with, sorted by index,
// and those it leaves out, so that one bad entry withholds that peer only, never the whole
// clique (imex.WriteConfig refuses a peer list with any of them). Entries without an address
// (the node's daemon is gone) are neither: they are absent, and their slot maps to its
// sentinel. Left out, with the reason:
//   - an address that does not parse or lies in imex.SentinelPrefix (the addresses that stand
//     for absent peers), or, with DNS names, an index outside [0, MaxNodes);
//   - an address, or with DNS names an index, that several entries share: every entry sharing
//     it is left out, because which of them really is at that address (or index) cannot be
//     told from the clique, and naming the wrong node there would connect IMEX to a stranger.
//     This node's own entry is the exception: its address is the one it listens on, so it is
//     kept and the entries sharing its address or index are left out instead.
//
// Every daemon of the clique applies the same rule to the same entries, so all of them agree on
// who is left out, apart from each keeping itself.
func usablePeers(dnsNames bool, maxNodes int, self string, peers []imex.Peer) (kept []imex.Peer, skipped []skippedPeer) {
	if maxNodes <= 0 {
		maxNodes = imex.DefaultMaxNodes
	}
	skip := map[string]string{} // node name -> reason
	byIP := map[netip.Addr][]imex.Peer{}
	byIndex := map[int][]imex.Peer{}
	var present []imex.Peer
	for _, p := range peers {
		// No address: the node's daemon is gone (its entry and index are kept for it). It is
		// not a conflict; the node is simply absent until its new daemon has an address.
		if p.IPAddress == "" && p.NodeName != self {
			continue
		}
		present = append(present, p)
	}
	peers = present
	for _, p := range peers {
		ip, err := netip.ParseAddr(p.IPAddress)
		switch {
		case err != nil && p.NodeName != self:
			skip[p.NodeName] = fmt.Sprintf("address %q does not parse", p.IPAddress)
			continue
		case err == nil && imex.SentinelPrefix.Contains(ip) && p.NodeName != self:
			skip[p.NodeName] = fmt.Sprintf("address %s is in the sentinel block %s", ip, imex.SentinelPrefix)
			continue
		case dnsNames && (p.Index < 0 || p.Index >= maxNodes) && p.NodeName != self:
			skip[p.NodeName] = fmt.Sprintf("index %d is outside [0, %d)", p.Index, maxNodes)
			continue
		}
		if err == nil {
			byIP[ip] = append(byIP[ip], p)
		}
		if dnsNames {
			byIndex[p.Index] = append(byIndex[p.Index], p)
		}
	}
	conflicts := func(what string, group []imex.Peer) {
		if len(group) < 2 {
			return
		}
		names := make([]string, 0, len(group))
		for _, p := range group {
			names = append(names, p.NodeName)
		}
		slices.Sort(names)
		for _, p := range group {
			if p.NodeName != self {
				if _, done := skip[p.NodeName]; !done {
					skip[p.NodeName] = fmt.Sprintf("%s shared by nodes %s", what, strings.Join(names, ", "))
				}
			}
		}
	}
	// In a fixed order, so that an entry in two conflicts always gives the same reason.
	for _, ip := range slices.SortedFunc(maps.Keys(byIP), netip.Addr.Compare) {
		conflicts("address "+ip.String(), byIP[ip])
	}
	for _, index := range slices.Sorted(maps.Keys(byIndex)) {
		conflicts(fmt.Sprintf("index %d", index), byIndex[index])
	}
	for _, p := range peers {
		if reason, ok := skip[p.NodeName]; ok {
			skipped = append(skipped, skippedPeer{NodeName: p.NodeName, Reason: reason})
			continue
		}
		kept = append(kept, p)
	}
	slices.SortFunc(kept, func(a, b imex.Peer) int {
		return cmp.Or(cmp.Compare(a.Index, b.Index), cmp.Compare(a.NodeName, b.NodeName))
	})
	slices.SortFunc(skipped, func(a, b skippedPeer) int { return cmp.Compare(a.NodeName, b.NodeName) })
	return kept, skipped
}
