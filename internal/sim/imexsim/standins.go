package imexsim

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Environment variables that give a simulated IMEX the node-level things the real one gets from
// its host: the simulated kubelet sets them on every container (the process form, Main, reads
// them from its environment), and an in-process Sim reads them from imex.Options.Env, which
// stands for its process environment. Without one, the behaviour that needs it is not
// modelled.
const (
	// HostsFileEnv names the file that stands for /etc/hosts: the simulated kubelet sets it to
	// the pod's hosts file, as a real container's resolver reads the pod's /etc/hosts. An
	// in-process Sim uses it when imex.Options.HostsPath is empty.
	HostsFileEnv = "CDPLANE_SIM_HOSTS_FILE"
	// NodeDirEnv is the host directory of the node the simulated IMEX runs on, its "/": the
	// driver's version file (DriverVersionPath), the node's IMEX session (SessionLockPath) and
	// the unsafe-termination marker (UnsafeMarkerPath) lie below it.
	NodeDirEnv = "CDPLANE_SIM_NODE_DIR"
	// LocalAddrsEnv lists the addresses of this host's network interfaces, comma-separated (the
	// pod's IP; a hostNetwork pod's is its node's InternalIP). With BIND_INTERFACE_IP empty the
	// real IMEX takes as its own address the node list entry that is one of its interfaces'
	// addresses; every 127/8 address is local on the simulator's machine, so the simulated one
	// needs to be told which are this host's.
	LocalAddrsEnv = "CDPLANE_SIM_LOCAL_ADDRS"
	// ResolvConfEnv is the host path of the container's resolv.conf, whose search list and
	// ndots option decide how many DNS lookups a name the hosts file does not map costs.
	ResolvConfEnv = "CDPLANE_SIM_RESOLV_CONF"
	// LinkRetryMaxEnv is the longest wait between two attempts to reach a peer, a Go duration
	// (default 500 ms: the simulation favours quick convergence; the real IMEX retries far less
	// often). `cdplane sim up` sets it longer in large sims, where thousands of simulated IMEX
	// daemons waiting for peers that have not started share a few processes, and their dials
	// were a large share of a kubelet process's CPU.
	LinkRetryMaxEnv = "CDPLANE_SIM_IMEX_LINK_RETRY_MAX"
	// ContainerPathsEnv is the container's view of the filesystem: the simulated kubelet sets
	// it on every container to the device nodes and mounts the container has, as a JSON object
	// from container path to host path (see EncodeContainerPaths). Its presence says that the
	// simulated IMEX runs in a container, which makes it strict: it refuses to start without
	// /dev/nvidiactl, the IMEX management device and libnvidia-ml.so.1 in the view (see
	// MissingError), and its session stays held DefaultShutdownDelay after a clean stop.
	ContainerPathsEnv = "CDPLANE_SIM_CONTAINER_PATHS"
	// ShutdownDelayEnv is how long the node's IMEX session stays held after a clean stop
	// (SIGTERM, Stop) has ended the run, while the driver releases its memory exports
	// (ReleasingPath), a Go duration; "0": not at all. Unset, a containerized IMEX
	// (ContainerPathsEnv set) gets DefaultShutdownDelay and any other (the host-managed service
	// the simulator runs, which is not given it, and runs built by tests) none. A crash or a
	// kill is never delayed. The simulated kubelet passes it from its own environment (set for
	// `cdplane sim up`) to every container.
	ShutdownDelayEnv = "CDPLANE_SIM_IMEX_SHUTDOWN_DELAY"
	// LibraryPathEnv is the dynamic loader's search path, colon-separated container
	// directories, that a containerized IMEX looks for libnvidia-ml.so.1 in before the
	// standard library directories (StandardLibDirs).
	LibraryPathEnv = "LD_LIBRARY_PATH"
)

// DefaultShutdownDelay is how long the node's IMEX session stays held after a clean stop of a
// containerized simulated IMEX: a few seconds, as the driver releasing a real IMEX's memory
// exports.
const DefaultShutdownDelay = 3 * time.Second

// Paths below a node directory (NodeDirEnv) that a simulated IMEX uses.
const (
	// ShutdownDelayPath, when it holds a Go duration, is that node's shutdown delay, in place
	// of ShutdownDelayEnv's: a node whose IMEX is slow to release its exports.
	ShutdownDelayPath = "/etc/cdplane/imex-shutdown-delay"
	// ReleasingPath holds, after a clean stop with a shutdown delay, until when the driver
	// keeps releasing that run's memory exports (RFC 3339): the node's IMEX session stays
	// held until then, after the run has ended.
	ReleasingPath = "/run/nvidia-imex/releasing"
	// DriverVersionPath is the loaded kernel driver's version file, which nodehost.WriteNode
	// writes: host names in the node list need driver MinHostnameDriverVersion or later.
	DriverVersionPath = "/proc/driver/nvidia/version"
	// SessionLockPath is the node's IMEX session: a run holds an exclusive flock on it from
	// the end of its start-up phase until it ends, as the kernel lets one IMEX a node hold its
	// session; a second one fails with ErrSessionInUse.
	SessionLockPath = "/run/nvidia-imex/session.lock"
	// UnsafeMarkerPath marks a run that holds the session and has not stopped cleanly: written
	// when the run takes the session, listing the peer addresses it has been connected to,
	// removed on a clean stop, left behind by a crash or a kill. A run that finds it recovers
	// (IMEX_WAIT_FOR_QUORUM=RECOVERY).
	UnsafeMarkerPath = "/run/nvidia-imex/unsafe"
)

// standIns are what a simulated IMEX took from its environment.
type standIns struct {
	// hostsFile is HostsFileEnv's value.
	hostsFile string
	// nodeDir is the node directory; empty: the node-level behaviours are not modelled.
	nodeDir string
	// localAddrs are this host's addresses; localAddrsSet says whether LocalAddrsEnv was set.
	localAddrs    []netip.Addr
	localAddrsSet bool
	// resolvConf is the container's resolv.conf; empty: glibc's defaults.
	resolvConf string
	// linkRetryMax is LinkRetryMaxEnv's value; zero: maxLinkBackoff.
	linkRetryMax time.Duration
	// view is ContainerPathsEnv's value, decoded; nil when the IMEX is not in a container.
	view *containerView
	// libraryPath is LibraryPathEnv's value.
	libraryPath string
	// shutdownDelay is ShutdownDelayEnv's value when shutdownDelaySet.
	shutdownDelay    time.Duration
	shutdownDelaySet bool
}

// stopDelay is how long a clean stop keeps holding the node's IMEX session: the node's
// ShutdownDelayPath when it holds a duration (read at the stop, so that a test can slow one
// node's IMEX down), else ShutdownDelayEnv's value, else DefaultShutdownDelay in a container and
// none outside.
func (si standIns) stopDelay() time.Duration {
	if si.nodeDir != "" {
		if data, err := os.ReadFile(si.onNode(ShutdownDelayPath)); err == nil {
			if d, err := time.ParseDuration(strings.TrimSpace(string(data))); err == nil && d >= 0 {
				return d
			}
		}
	}
	switch {
	case si.shutdownDelaySet:
		return si.shutdownDelay
	case si.view != nil:
		return DefaultShutdownDelay
	}
	return 0
}

// linkBackoffCap is the longest wait between two attempts to reach a peer.
func (si standIns) linkBackoffCap() time.Duration {
	if si.linkRetryMax > 0 {
		return si.linkRetryMax
	}
	return maxLinkBackoff
}

// standInsFrom reads the stand-ins through lookup; an address in LocalAddrsEnv that does not
// parse is an error naming it.
func standInsFrom(lookup func(string) (string, bool)) (standIns, error) {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	si := standIns{hostsFile: get(HostsFileEnv), nodeDir: get(NodeDirEnv), resolvConf: get(ResolvConfEnv)}
	if si.nodeDir != "" {
		abs, err := filepath.Abs(si.nodeDir)
		if err != nil {
			return si, fmt.Errorf("%s=%s: %w", NodeDirEnv, si.nodeDir, err)
		}
		si.nodeDir = abs
	}
	if v := get(LinkRetryMaxEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return si, fmt.Errorf("%s: %q is not a positive duration", LinkRetryMaxEnv, v)
		}
		si.linkRetryMax = d
	}
	if v := get(ShutdownDelayEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return si, fmt.Errorf("%s: %q is not a duration of 0 or more", ShutdownDelayEnv, v)
		}
		si.shutdownDelay, si.shutdownDelaySet = d, true
	}
	if v, ok := lookup(ContainerPathsEnv); ok {
		view, err := decodeView(v)
		if err != nil {
			return si, fmt.Errorf("%s: %w", ContainerPathsEnv, err)
		}
		si.view = view
	}
	si.libraryPath, _ = lookup(LibraryPathEnv)
	if v, ok := lookup(LocalAddrsEnv); ok {
		si.localAddrsSet = true
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f == "" {
				continue
			}
			addr, err := netip.ParseAddr(f)
			if err != nil {
				return si, fmt.Errorf("%s: %q is not an IP address", LocalAddrsEnv, f)
			}
			si.localAddrs = append(si.localAddrs, addr.Unmap())
		}
	}
	return si, nil
}

// envLookup looks a variable up in env (KEY=VALUE entries; the last one of a key wins, as when
// a process environment is built by appending).
func envLookup(env []string) func(string) (string, bool) {
	return func(key string) (string, bool) {
		for i := len(env) - 1; i >= 0; i-- {
			if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
				return v, true
			}
		}
		return "", false
	}
}

// onNode is the host path of p (one of this file's node paths) below the node directory.
func (si standIns) onNode(p string) string { return filepath.Join(si.nodeDir, p) }
