package endpoints

import (
	"net"
	"strings"
	"testing"
)

// TestListenTakenPort: a taken port fails the start, naming the endpoint.
func TestListenTakenPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	for name, addrs := range map[string][2]string{"health service": {l.Addr().String(), ""}, "metrics endpoint": {"", l.Addr().String()}} {
		eps, err := Listen(addrs[0], addrs[1])
		if err == nil || !strings.Contains(err.Error(), name) {
			eps.Stop()
			t.Errorf("listen on a taken port for the %s: %v, want an error naming it", name, err)
		}
	}
}
