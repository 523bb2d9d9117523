package endpoints

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"sync"
)

// ListenSocket is the DRA helper's listener for the plugin's registration and DRA sockets. Like
// the helper's own, it first removes whatever is at path (a socket a previous instance left, or
// the one of an instance still stopping: the newest instance is the one the kubelet must reach).
// Unlike the helper's own, its Close removes the socket only while path is still this
// listener's: two plugins overlap on a node whenever it moves to another control plane (the old
// plane's plugin stops while the new one's starts, both under the driver's socket names), and
// the old one, stopping last, would otherwise delete the sockets of the new one. The kubelet's
// plugin watcher then deregisters the driver, and the node takes no claim until the new
// plugin's liveness probe restarts it.
func ListenSocket(ctx context.Context, path string) (net.Listener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("removing the old socket %s: %w", path, err)
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	ul, ok := l.(*net.UnixListener)
	if !ok {
		_ = l.Close()
		return nil, fmt.Errorf("listening on %s: a %T, not a Unix listener", path, l)
	}
	ul.SetUnlinkOnClose(false)
	fi, err := os.Lstat(path)
	if err != nil {
		_ = ul.Close()
		return nil, fmt.Errorf("the socket %s just made: %w", path, err)
	}
	return &socketListener{UnixListener: ul, path: path, file: fi}, nil
}

// socketListener is a Unix listener that, closed, removes its socket file only if path still
// names it (same device and inode).
type socketListener struct {
	*net.UnixListener
	path string
	file os.FileInfo
	once sync.Once
}

func (l *socketListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() {
		fi, statErr := os.Lstat(l.path)
		if statErr != nil || !os.SameFile(fi, l.file) {
			return // gone, or another instance's socket now
		}
		if rmErr := os.Remove(l.path); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("removing the socket %s: %w", l.path, rmErr))
		}
	})
	return err
}
