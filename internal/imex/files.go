package imex

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"syscall"

	"cdplane/internal/atomicfile"
)

// Action is what a running IMEX daemon needs after its files changed.
type Action int

const (
	// ActionNone means nothing IMEX reads changed.
	ActionNone Action = iota
	// ActionReload means only the hosts file changed; SIGUSR1 makes IMEX re-resolve its
	// peers' names and reconnect (Interface.Reload).
	ActionReload
	// ActionRestart means the imexd config or nodes.cfg changed; IMEX reads both only when it
	// starts, so it must be stopped and started again. In DNS-names mode this happens only when
	// the settings change, never on a membership change.
	ActionRestart
)

// String names the action for logs.
func (a Action) String() string {
	switch a {
	case ActionNone:
		return "None"
	case ActionReload:
		return "Reload"
	case ActionRestart:
		return "Restart"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Changes says which of IMEX's files WriteConfig changed on disk.
type Changes struct {
	IMEXConfig  bool
	NodesConfig bool
	Hosts       bool
}

// Any reports whether any file changed.
func (c Changes) Any() bool { return c.IMEXConfig || c.NodesConfig || c.Hosts }

// Action says what a running IMEX needs after these changes. A caller that has not started
// IMEX yet just starts it: the first start reads every file, so no SIGUSR1 is sent.
func (c Changes) Action() Action {
	switch {
	case c.IMEXConfig || c.NodesConfig:
		return ActionRestart
	case c.Hosts:
		return ActionReload
	}
	return ActionNone
}

// WriteConfig renders IMEX's files for this node and the given clique members and writes the
// ones whose content differs from what is on disk, each atomically. It writes the peer files
// before the imexd config, so that an IMEX started or signalled afterwards sees a consistent
// set. The hosts file is touched only in DNS-names mode; lines in it that this package did
// not write are kept.
func WriteConfig(s Settings, peers []Peer) (Changes, error) {
	var changes Changes
	imexCfg, err := RenderIMEXConfig(s)
	if err != nil {
		return changes, fmt.Errorf("rendering IMEX config: %w", err)
	}
	if s.IMEXConfigPath == "" {
		return changes, fmt.Errorf("IMEX config path is empty")
	}
	nodesCfg, err := RenderNodesConfig(s, peers)
	if err != nil {
		return changes, fmt.Errorf("rendering nodes config: %w", err)
	}
	if s.DNSNames {
		if s.HostsPath == "" {
			return changes, fmt.Errorf("hosts file path is empty in DNS-names mode")
		}
		existing, err := os.ReadFile(s.HostsPath)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return changes, fmt.Errorf("reading hosts file: %w", err)
		}
		hosts, err := RenderHosts(existing, s, peers)
		if err != nil {
			return changes, fmt.Errorf("rendering hosts file: %w", err)
		}
		if changes.Hosts, err = atomicfile.WriteIfChanged(s.HostsPath, hosts, 0o644); err != nil {
			return changes, err
		}
	}
	if changes.NodesConfig, err = atomicfile.WriteIfChanged(s.NodesConfigPath, nodesCfg, 0o644); err != nil {
		return changes, err
	}
	if changes.IMEXConfig, err = atomicfile.WriteIfChanged(s.IMEXConfigPath, imexCfg, 0o644); err != nil {
		return changes, err
	}
	return changes, nil
}

// ConfigWriter is WriteConfig for one daemon: it remembers what it last wrote and how the files
// stood after it, and when asked to write the same settings and peers again while every file
// still stands so (same inode, size, modification and change times), it returns no changes
// without rendering or reading anything. A daemon calls it on every event of its clique, most of
// which (other entries turning Ready) change nothing IMEX reads; rendering and comparing the
// unchanged files on each is wasted CPU, plain in a benchmark process running thousands of
// daemons (see docs/scale.md, "Design choices and what was measured"). A file changed behind
// it, or a failed write, makes the next call render and write as WriteConfig does.
// The zero value is ready to use; it is not safe for concurrent use.
type ConfigWriter struct {
	settings Settings
	peers    []Peer
	files    []fileState
	valid    bool
}

// fileState is what tells a file changed: the identity and times of the file at a path (an
// absent file is its zero value with exists false).
type fileState struct {
	exists       bool
	ino, size    uint64
	mtime, ctime syscall.Timespec
}

// Write writes IMEX's files for s and peers as WriteConfig does, unless they are what it last
// wrote and still stand as it left them.
func (w *ConfigWriter) Write(s Settings, peers []Peer) (Changes, error) {
	paths := configPaths(s)
	if w.valid && w.settings == s && slices.Equal(w.peers, peers) && w.unchanged(paths) {
		return Changes{}, nil
	}
	w.valid = false
	changes, err := WriteConfig(s, peers)
	if err != nil {
		return changes, err
	}
	files := make([]fileState, len(paths))
	for i, p := range paths {
		if files[i], err = stateOf(p); err != nil {
			return changes, nil // written; the next call compares contents again
		}
	}
	w.settings, w.peers, w.files, w.valid = s, slices.Clone(peers), files, true
	return changes, nil
}

// unchanged reports whether every path stands as it did after the last write.
func (w *ConfigWriter) unchanged(paths []string) bool {
	if len(paths) != len(w.files) {
		return false
	}
	for i, p := range paths {
		st, err := stateOf(p)
		if err != nil || st != w.files[i] {
			return false
		}
	}
	return true
}

// configPaths are the files WriteConfig writes for s.
func configPaths(s Settings) []string {
	if s.DNSNames {
		return []string{s.IMEXConfigPath, s.NodesConfigPath, s.HostsPath}
	}
	return []string{s.IMEXConfigPath, s.NodesConfigPath}
}

func stateOf(path string) (fileState, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return fileState{}, nil
		}
		return fileState{}, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return fileState{exists: true, ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim, ctime: st.Ctim}, nil
}
