package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// PluginRegistryDir is the kubelet's plugin registry, below each node's directory.
const PluginRegistryDir = "var/lib/kubelet/plugins_registry"

// plugin is a registered DRA driver of one node.
type plugin struct {
	name     string
	endpoint string // host path of its DRA socket
	socket   string // its registration socket
	conn     *grpc.ClientConn
	client   drapbv1.DRAPluginClient
}

// socketInfo is what is known of a registration socket: the driver it registered and the
// socket file's modification time then.
type socketInfo struct {
	name string
	mod  time.Time
}

// watchPlugins scans every node's plugin registry every PluginPollInterval, registering new
// sockets and dropping the plugins whose socket went away (a scan of a small directory per node
// is cheaper than an inotify watch per node and needs nothing more).
func (k *Kubelet) watchPlugins(ctx context.Context) {
	t := time.NewTicker(k.cfg.PluginPollInterval)
	defer t.Stop()
	for {
		for _, n := range k.order {
			n.scanRegistry(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (n *node) scanRegistry(ctx context.Context) {
	dir := filepath.Join(n.dir, PluginRegistryDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			_ = os.MkdirAll(dir, 0o755)
		}
		entries = nil
	}
	present := map[string]bool{}
	for _, e := range entries {
		if e.Type()&os.ModeSocket == 0 || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fi, err := e.Info()
		if err != nil {
			continue
		}
		present[path] = true
		n.mu.Lock()
		known, ok := n.sockets[path]
		n.mu.Unlock()
		if !ok || !known.mod.Equal(fi.ModTime()) {
			// New, or a plugin that restarted and made its socket again.
			n.registerPlugin(ctx, path, fi.ModTime())
		}
	}
	n.mu.Lock()
	var gone []*plugin
	for path, known := range n.sockets {
		if !present[path] {
			delete(n.sockets, path)
			if p := n.plugins[known.name]; p != nil && p.socket == path {
				delete(n.plugins, known.name)
				gone = append(gone, p)
			}
		}
	}
	n.mu.Unlock()
	for _, p := range gone {
		klog.FromContext(ctx).V(1).Info("DRA plugin deregistered", "node", n.spec.Name, "driver", p.name)
		_ = p.conn.Close()
	}
}

// registerPlugin plays the kubelet's plugin watcher for one registration socket: GetInfo, check
// the type and the DRA service version, dial the endpoint (remapped into the node directory),
// and report the outcome with NotifyRegistrationStatus. A socket that does not answer is tried
// again on the next scan.
func (n *node) registerPlugin(ctx context.Context, socket string, mod time.Time) {
	logger := klog.FromContext(ctx).WithValues("node", n.spec.Name, "socket", socket)
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		logger.Error(err, "Dialing a registration socket")
		return
	}
	defer func() { _ = conn.Close() }()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	reg := registerapi.NewRegistrationClient(conn)
	info, err := reg.GetInfo(cctx, &registerapi.InfoRequest{})
	if err != nil {
		logger.V(2).Info("Registration socket does not answer yet", "err", err)
		return
	}
	p, regErr := n.newPlugin(info)
	status := &registerapi.RegistrationStatus{PluginRegistered: regErr == nil}
	if regErr != nil {
		status.Error = regErr.Error()
	}
	if _, err := reg.NotifyRegistrationStatus(cctx, status); err != nil {
		logger.V(2).Info("NotifyRegistrationStatus failed", "err", err)
		if p != nil {
			_ = p.conn.Close()
		}
		return
	}
	n.mu.Lock()
	n.sockets[socket] = socketInfo{name: info.Name, mod: mod}
	var old *plugin
	if p != nil {
		p.socket = socket
		old = n.plugins[info.Name]
		n.plugins[info.Name] = p
	}
	n.mu.Unlock()
	if old != nil {
		_ = old.conn.Close()
	}
	if regErr != nil {
		logger.Error(regErr, "Refused plugin registration", "plugin", info.Name)
		return
	}
	logger.V(1).Info("DRA plugin registered", "driver", info.Name, "endpoint", p.endpoint)
}

// newPlugin checks a plugin's info and connects to its DRA endpoint.
func (n *node) newPlugin(info *registerapi.PluginInfo) (*plugin, error) {
	if info.Type != registerapi.DRAPlugin {
		return nil, fmt.Errorf("plugin type %q is not simulated (only %s)", info.Type, registerapi.DRAPlugin)
	}
	if !slices.Contains(info.SupportedVersions, drapbv1.DRAPluginService) {
		return nil, fmt.Errorf("plugin %s supports %v, not %s", info.Name, info.SupportedVersions, drapbv1.DRAPluginService)
	}
	if info.Name == "" || info.Endpoint == "" {
		return nil, fmt.Errorf("plugin info without name or endpoint: %v", info)
	}
	endpoint := OnNode(n.dir, info.Endpoint)
	conn, err := grpc.NewClient("unix://"+endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", endpoint, err)
	}
	return &plugin{name: info.Name, endpoint: endpoint, conn: conn, client: drapbv1.NewDRAPluginClient(conn)}, nil
}

// plugin returns the registered plugin of a driver.
func (n *node) plugin(driver string) *plugin {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.plugins[driver]
}

func (n *node) closePlugins() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for name, p := range n.plugins {
		_ = p.conn.Close()
		delete(n.plugins, name)
	}
	clear(n.sockets)
}
