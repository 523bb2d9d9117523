package imex

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"cdplane/internal/atomicfile"
)

// Action is what a running IMEX daemon needs after its files changed.
type Action int

const (
	// ActionNone: nothing IMEX reads changed.
	ActionNone Action = iota
	// ActionReload: only the hosts file changed; SIGUSR1 makes IMEX re-resolve its peers'
	// names and reconnect (Interface.Reload).
	ActionReload
	// ActionRestart: the imexd config or nodes.cfg changed; IMEX reads both only when it
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
