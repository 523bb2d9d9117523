package kubelet

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNewIPAllocator(t *testing.T) {
	for name, tc := range map[string]struct {
		cidr    string
		wantErr bool
	}{
		"default":                   {cidr: DefaultPodCIDR},
		"small":                     {cidr: "127.5.0.0/30"},
		"too small":                 {cidr: "127.5.0.0/31", wantErr: true},
		"not loopback":              {cidr: "10.0.0.0/24", wantErr: true},
		"wider than /8":             {cidr: "126.0.0.0/7", wantErr: true},
		"ipv6":                      {cidr: "::1/128", wantErr: true},
		"garbage":                   {cidr: "x", wantErr: true},
		"sentinel block":            {cidr: "127.127.0.0/16", wantErr: true},
		"in the sentinel block":     {cidr: "127.127.4.0/24", wantErr: true},
		"around the sentinel block": {cidr: "127.126.0.0/15"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewIPAllocator(tc.cidr)
			if (err != nil) != tc.wantErr {
				t.Errorf("NewIPAllocator(%q) error %v, want error %v", tc.cidr, err, tc.wantErr)
			}
		})
	}
}

// allocate takes n addresses and returns them as strings.
func allocate(t *testing.T, a *IPAllocator, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ip, err := a.Allocate()
		if err != nil {
			t.Fatalf("Allocate: %v", err)
		}
		out = append(out, ip.String())
	}
	return out
}

func TestIPAllocator(t *testing.T) {
	// 127.5.0.0/29: usable .1 … .6; .3 is a node's.
	a, err := NewIPAllocator("127.5.0.0/29", netip.MustParseAddr("127.5.0.3"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"127.5.0.1", "127.5.0.2", "127.5.0.4"}, allocate(t, a, 3)); diff != "" {
		t.Errorf("first addresses (-want +got):\n%s", diff)
	}
	a.Release(netip.MustParseAddr("127.5.0.1"))
	// Released addresses come back only after the rest of the range.
	if diff := cmp.Diff([]string{"127.5.0.5", "127.5.0.6", "127.5.0.1"}, allocate(t, a, 3)); diff != "" {
		t.Errorf("after a release (-want +got):\n%s", diff)
	}
	if _, err := a.Allocate(); !errors.Is(err, ErrNoAddresses) {
		t.Errorf("full range: error %v, want ErrNoAddresses", err)
	}
	if a.InUse() != 5 {
		t.Errorf("InUse %d, want 5", a.InUse())
	}
	a.Release(netip.MustParseAddr("127.5.0.4"))
	a.Release(netip.MustParseAddr("127.5.0.4")) // twice: no effect
	if diff := cmp.Diff([]string{"127.5.0.4"}, allocate(t, a, 1)); diff != "" {
		t.Errorf("after another release (-want +got):\n%s", diff)
	}
}

func TestIPAllocatorUnique(t *testing.T) {
	a, err := NewIPAllocator(DefaultPodCIDR)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, ip := range allocate(t, a, 10000) {
		if seen[ip] {
			t.Fatalf("%s handed out twice", ip)
		}
		seen[ip] = true
	}
}

// An allocator whose range holds IMEX's sentinel block never hands out one of its addresses.
func TestIPAllocatorSkipsSentinels(t *testing.T) {
	// 127.126.0.0/15: 127.126.0.1 … 127.127.255.254, of which 127.127.0.0/16 is the block.
	a, err := NewIPAllocator("127.126.0.0/15")
	if err != nil {
		t.Fatal(err)
	}
	a.next = 1<<16 - 3 // start at 127.126.255.254, the block's neighbour
	want := []string{"127.126.255.254", "127.126.255.255", "127.126.0.1"}
	if diff := cmp.Diff(want, allocate(t, a, 3)); diff != "" {
		t.Errorf("addresses (-want +got):\n%s", diff)
	}
}
