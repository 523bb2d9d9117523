package kubelet

import (
	"cdplane/internal/imex"
	"errors"
	"fmt"
	"net/netip"
	"sync"
)

// DefaultPodCIDR is the loopback range pod addresses come from: every 127.0.0.0/8 address is
// bindable on Linux without configuration.
const DefaultPodCIDR = "127.128.0.0/9"

var loopback = netip.MustParsePrefix("127.0.0.0/8")

// IMEXSentinelPrefix is the block of loopback addresses that cdplane's IMEX configuration uses
// as sentinels (the product's imex.SentinelPrefix): its hosts files map the name of every IMEX
// slot no daemon holds to an address there, where nothing may listen. No pod and no node of a
// simulated cluster gets one.
var IMEXSentinelPrefix = imex.SentinelPrefix

// ErrNoAddresses is returned when every address of the range is in use.
var ErrNoAddresses = errors.New("no free pod address")

// IPAllocator hands out loopback addresses of one range, each to one holder at a time. It
// moves round the range (a released address is not handed out again until the others were),
// and never hands out the first and last address of the range, a reserved one, or one in
// IMEXSentinelPrefix.
type IPAllocator struct {
	mu       sync.Mutex
	first    uint32 // first usable address
	size     uint32 // number of usable addresses
	next     uint32 // offset tried next
	used     map[uint32]bool
	reserved map[uint32]bool
}

// NewIPAllocator returns an allocator for cidr, which must lie inside 127.0.0.0/8 and hold at
// least one usable address. Reserved addresses (the nodes' own) are never handed out.
func NewIPAllocator(cidr string, reserved ...netip.Addr) (*IPAllocator, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, fmt.Errorf("pod range %q: %w", cidr, err)
	}
	p = p.Masked()
	if !p.Addr().Is4() || !loopback.Contains(p.Addr()) || p.Bits() < loopback.Bits() {
		return nil, fmt.Errorf("pod range %s: must lie inside %s", p, loopback)
	}
	if IMEXSentinelPrefix.Bits() <= p.Bits() && IMEXSentinelPrefix.Contains(p.Addr()) {
		return nil, fmt.Errorf("pod range %s: lies in %s, IMEX's sentinel addresses", p, IMEXSentinelPrefix)
	}
	total := uint64(1) << (32 - p.Bits())
	if total < 3 {
		return nil, fmt.Errorf("pod range %s: too small", p)
	}
	a := &IPAllocator{
		first: toUint32(p.Addr()) + 1, size: uint32(total - 2),
		used: map[uint32]bool{}, reserved: map[uint32]bool{},
	}
	for _, r := range reserved {
		a.reserved[toUint32(r)] = true
	}
	return a, nil
}

// Allocate returns a free address and marks it used.
func (a *IPAllocator) Allocate() (netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := uint32(0); i < a.size; i++ {
		off := (a.next + i) % a.size
		v := a.first + off
		if a.used[v] || a.reserved[v] || IMEXSentinelPrefix.Contains(fromUint32(v)) {
			continue
		}
		a.used[v] = true
		a.next = (off + 1) % a.size
		return fromUint32(v), nil
	}
	return netip.Addr{}, ErrNoAddresses
}

// Release returns an address to the range; releasing a free address does nothing.
func (a *IPAllocator) Release(ip netip.Addr) {
	if !ip.Is4() {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.used, toUint32(ip))
}

// InUse says how many addresses are handed out.
func (a *IPAllocator) InUse() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.used)
}

func toUint32(ip netip.Addr) uint32 {
	b := ip.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func fromUint32(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
