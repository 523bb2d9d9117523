package kubelet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// registrar is a plugin's registration socket: it answers GetInfo once answering is set.
type registrar struct {
	registerapi.UnimplementedRegistrationServer
	answering atomic.Bool
}

func (r *registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	if !r.answering.Load() {
		return nil, errors.New("not serving yet")
	}
	return &registerapi.PluginInfo{
		Type: registerapi.DRAPlugin, Name: "test.example.com",
		Endpoint: "/var/lib/kubelet/plugins/test/dra.sock", SupportedVersions: []string{drapbv1.DRAPluginService},
	}, nil
}

func (r *registrar) NotifyRegistrationStatus(context.Context, *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	return &registerapi.RegistrationStatusResponse{}, nil
}

// serveRegistrar serves r on a socket in dir and returns a func that stops it and removes
// the socket.
func serveRegistrar(t *testing.T, dir string, r *registrar) (stop func()) {
	t.Helper()
	path := filepath.Join(dir, "t.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	registerapi.RegisterRegistrationServer(s, r)
	go func() { _ = s.Serve(l) }()
	stop = func() {
		s.Stop()
		_ = os.Remove(path)
	}
	t.Cleanup(stop)
	return stop
}

// TestRegistryScans checks when a node's plugin registry is listed: an unchanged registry is
// not listed again, and each case in which the directory's time cannot tell is.
func TestRegistryScans(t *testing.T) {
	base, err := os.MkdirTemp("", "reg") // short: it holds a Unix socket
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	n := newNode(nil, NodeSpec{Name: "node-0"}, netip.Addr{}, base)
	dir := filepath.Join(base, PluginRegistryDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// age moves the directory's modification time an hour back: the listing after it begins
	// well after the directory last changed, as on a registry nothing touched for a while.
	age := func() {
		t.Helper()
		past := time.Now().Add(-time.Hour)
		if err := os.Chtimes(dir, past, past); err != nil {
			t.Fatal(err)
		}
	}
	ctx := t.Context()
	scan := func(want int64, why string) {
		t.Helper()
		n.scanRegistry(ctx)
		if got := n.listings.Load(); got != want {
			t.Fatalf("%s: %d listings, want %d", why, got, want)
		}
	}
	registered := func() bool { return n.plugin("test.example.com") != nil }

	age()
	scan(1, "the first scan")
	scan(1, "an unchanged registry")

	r := &registrar{}
	stop := serveRegistrar(t, dir, r)
	scan(2, "a socket made")
	if registered() {
		t.Fatal("registered a plugin whose socket did not answer")
	}
	age()
	scan(3, "the directory's time moved back")
	scan(4, "a socket that did not answer, in an unchanged directory")
	r.answering.Store(true)
	scan(5, "the socket answering now")
	if !registered() {
		t.Fatal("the plugin is not registered once its socket answered")
	}
	age()
	scan(6, "the directory's time moved back")
	scan(6, "an unchanged registry with its plugin registered")

	stop()
	scan(7, "the socket removed")
	if registered() {
		t.Fatal("the plugin stays registered after its socket went")
	}
	// Listed within a second of its last change: a socket made in the same clock tick would not
	// have moved the directory's time, so the next scan lists it again.
	scan(8, "a listing within the clock margin of the last change")

	age()
	scan(9, "the directory's time moved back")
	scan(9, "an unchanged registry")
	n.closePlugins()
	scan(10, "after the node's plugins were closed")
}
