package controlplane

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// etcdSocketDir is the directory, under the control plane's, of etcd's Unix sockets.
const etcdSocketDir = "etcd-sockets"

// maxSocketPath is the longest path a Unix socket may have (sun_path is 108 bytes, NUL
// included).
const maxSocketPath = 107

// sockets are etcd's client and peer Unix sockets, in a directory only the owner can enter:
// etcd accepts any client that reaches it (no TLS, no authentication), so reaching it is what
// must be restricted, and a loopback TCP port would let every local user read and write the
// cluster's whole state. Peers get a socket too: a single member has none, but etcd needs a
// peer listener and its raft endpoints must not be reachable either.
type sockets struct {
	dir string
}

// etcdSockets creates (or tightens) the socket directory under dir, mode 0700, and checks
// that the socket paths fit.
func etcdSockets(dir string) (sockets, error) {
	s := sockets{dir: filepath.Join(dir, etcdSocketDir)}
	if n := len(s.clientPath()); n > maxSocketPath {
		return sockets{}, fmt.Errorf("etcd's socket %s would be %d bytes long, over the %d a Unix socket path may have: use a shorter directory",
			s.clientPath(), n, maxSocketPath)
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return sockets{}, err
	}
	// MkdirAll leaves an existing directory's mode as it is.
	if err := os.Chmod(s.dir, 0o700); err != nil {
		return sockets{}, err
	}
	return s, nil
}

func (s sockets) clientPath() string { return filepath.Join(s.dir, "client.sock") }

// clientURL is etcd's client URL, for etcd and for kube-apiserver's --etcd-servers.
func (s sockets) clientURL() string { return "unix://" + s.clientPath() }

// peerURL is etcd's peer URL. etcd takes a peer socket's path from the URL's host alone,
// relative to its working directory, which is therefore s.dir. etcd 3.6 (the one Kubernetes
// 1.34 pins) checks that an advertised peer URL's host is host:port, so the socket's name
// carries a port: the file is "peer.sock:0".
func (s sockets) peerURL() string { return "unix://peer.sock:0" }

// httpClient reaches etcd's HTTP endpoints (/health) through the client socket, whatever the
// URL's host.
func (s sockets) httpClient() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", s.clientPath())
		},
	}}
}

// etcdFlags are etcd's flags: a single member listening on Unix sockets only.
func etcdFlags(o Options, s sockets) flags {
	f := flags{}
	f.set("data-dir", filepath.Join(o.Dir, "etcd"))
	f.set("listen-client-urls", s.clientURL())
	// The advertised client URL is only published in the member list (the apiserver dials
	// --etcd-servers, the absolute listen URL). etcd 3.6 requires host:port in it, so it names
	// the socket relative to etcd's working directory, s.dir, with a port, as the peer URL does.
	f.set("advertise-client-urls", "unix://client.sock:0")
	f.set("listen-peer-urls", s.peerURL())
	f.set("initial-advertise-peer-urls", s.peerURL())
	f.set("initial-cluster", "default="+s.peerURL())
	f.set("unsafe-no-fsync", "true")
	f.set("quota-backend-bytes", "8589934592")
	return f
}
