package imex

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// DefaultNodesConfigPath is where IMEX looks for its node list when the imexd config does not
// say (IMEX_NODE_CONFIG_FILE).
const DefaultNodesConfigPath = "/etc/nvidia-imex/nodes_config.cfg"

// ConfigError is a permanent error in an IMEX config file: the same content fails again.
// Line is 1-based, or 0 when the error concerns the file as a whole.
type ConfigError struct {
	File   string
	Line   int
	Text   string
	Reason string
}

// Error names the file, the line and its text.
func (e *ConfigError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %s", e.File, e.Reason)
	}
	return fmt.Sprintf("%s:%d: %q: %s", e.File, e.Line, e.Text, e.Reason)
}

// DaemonConfig is what an IMEX daemon and its readiness query take from the imexd config.
type DaemonConfig struct {
	// BindIP is BIND_INTERFACE_IP; the zero Addr when empty.
	BindIP netip.Addr
	// ServerPort is SERVER_PORT (default DefaultServerPort).
	ServerPort int
	// NodesConfigPath is IMEX_NODE_CONFIG_FILE (default DefaultNodesConfigPath).
	NodesConfigPath string
	// Daemonize is DAEMONIZE (default true).
	Daemonize bool
	// CmdEnabled is IMEX_CMD_ENABLED (default false).
	CmdEnabled bool
	// CmdBindIP is IMEX_CMD_BIND_INTERFACE_IP; the zero Addr when empty.
	CmdBindIP netip.Addr
	// CmdPort is IMEX_CMD_PORT; 0 when unset.
	CmdPort int
	// CmdUnixPath is IMEX_CMD_UNIX_DOMAIN_PATH, the Unix domain socket the command service
	// listens on (nvidia-imex-ctl --u=PATH asks it there); empty when unset. It is an absolute
	// path.
	CmdUnixPath string
	// LogFile is LOG_FILE_NAME.
	LogFile string
}

// ReadIMEXConfig reads and parses the imexd config at path.
func ReadIMEXConfig(path string) (DaemonConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return DaemonConfig{}, fmt.Errorf("reading IMEX config: %w", err)
	}
	return ParseIMEXConfig(path, data)
}

// ParseIMEXConfig parses an imexd config: KEY=VALUE lines, blank lines and # comments. Keys it
// does not use are accepted (the real file has many); a line that is not KEY=VALUE, a key given
// twice, or a bad value for a key it uses is a *ConfigError naming the line.
func ParseIMEXConfig(file string, data []byte) (DaemonConfig, error) {
	cfg := DaemonConfig{
		ServerPort:      DefaultServerPort,
		NodesConfigPath: DefaultNodesConfigPath,
		Daemonize:       true,
	}
	seen := map[string]int{}
	for i, raw := range splitLines(data) {
		n, line := i+1, strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		bad := func(format string, args ...any) error {
			return &ConfigError{File: file, Line: n, Text: raw, Reason: fmt.Sprintf(format, args...)}
		}
		key, value, ok := strings.Cut(line, "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if !ok || !validKey(key) {
			return cfg, bad("expected KEY=VALUE")
		}
		if prev, dup := seen[key]; dup {
			return cfg, bad("%s already set on line %d", key, prev)
		}
		seen[key] = n
		var err error
		switch key {
		case "BIND_INTERFACE_IP":
			cfg.BindIP, err = optionalAddr(value)
		case "SERVER_PORT":
			cfg.ServerPort, err = port(value)
		case "IMEX_NODE_CONFIG_FILE":
			cfg.NodesConfigPath = value
		case "DAEMONIZE":
			cfg.Daemonize, err = flag01(value)
		case "IMEX_CMD_ENABLED":
			cfg.CmdEnabled, err = flag01(value)
		case "IMEX_CMD_BIND_INTERFACE_IP":
			cfg.CmdBindIP, err = optionalAddr(value)
		case "IMEX_CMD_PORT":
			cfg.CmdPort, err = port(value)
		case "IMEX_CMD_UNIX_DOMAIN_PATH":
			cfg.CmdUnixPath, err = optionalAbsPath(value)
		case "LOG_FILE_NAME":
			cfg.LogFile = value
		}
		if err != nil {
			return cfg, bad("%s: %v", key, err)
		}
	}
	return cfg, nil
}

func validKey(key string) bool {
	if key == "" {
		return false
	}
	for _, r := range key {
		if (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '_' {
			return false
		}
	}
	return true
}

func optionalAddr(value string) (netip.Addr, error) {
	if value == "" {
		return netip.Addr{}, nil
	}
	addr, err := netip.ParseAddr(value)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("invalid IP address")
	}
	return addr, nil
}

// optionalAbsPath accepts an empty value (unset) or an absolute path.
func optionalAbsPath(value string) (string, error) {
	if value != "" && !strings.HasPrefix(value, "/") {
		return "", fmt.Errorf("must be an absolute path")
	}
	return value, nil
}

func port(value string) (int, error) {
	p, err := strconv.Atoi(value)
	if err != nil || p < 0 || p > 65535 {
		return 0, fmt.Errorf("port must be a number between 0 and 65535")
	}
	return p, nil
}

func flag01(value string) (bool, error) {
	switch value {
	case "0":
		return false, nil
	case "1":
		return true, nil
	}
	return false, fmt.Errorf("must be 0 or 1")
}

// Node is one entry of nodes.cfg after its name, if it is one, was looked up in the hosts file.
type Node struct {
	// Line is the entry's 1-based line in nodes.cfg.
	Line int
	// Entry is the entry as written: an address or a name.
	Entry string
	// Addr is the entry's address; the zero Addr for a name the hosts file does not map (a
	// slot with no member yet: IMEX keeps trying to reach it).
	Addr netip.Addr
}

// ParseNodes parses nodes.cfg (one address or name a line; blank lines and # comments are
// skipped) and resolves names through hosts (the /etc/hosts format). A line that is neither an
// address nor a name, an invalid address, or an entry that repeats another (also after
// resolution) is a *ConfigError naming the nodes.cfg line; a hosts line that maps a listed name
// to an invalid address, or maps a name already mapped, is one naming the hosts line. Names the
// hosts file does not map resolve to the zero Addr.
func ParseNodes(nodesFile string, nodes []byte, hostsFile string, hosts []byte) ([]Node, error) {
	var out []Node
	firstLine := map[string]int{}
	for i, raw := range splitLines(nodes) {
		n, entry := i+1, strings.TrimSpace(raw)
		if entry == "" || strings.HasPrefix(entry, "#") {
			continue
		}
		bad := func(format string, args ...any) error {
			return &ConfigError{File: nodesFile, Line: n, Text: raw, Reason: fmt.Sprintf(format, args...)}
		}
		node := Node{Line: n, Entry: entry}
		switch {
		case strings.ContainsAny(entry, " \t"):
			return nil, bad("expected one address or name")
		case looksLikeAddr(entry):
			addr, err := netip.ParseAddr(entry)
			if err != nil {
				return nil, bad("invalid IP address")
			}
			node.Addr = addr
		case !validHostname(entry):
			return nil, bad("invalid name")
		}
		key := strings.ToLower(entry)
		if prev, dup := firstLine[key]; dup {
			return nil, bad("duplicate of line %d", prev)
		}
		firstLine[key] = n
		out = append(out, node)
	}
	names, err := parseHosts(hostsFile, hosts, firstLine)
	if err != nil {
		return nil, err
	}
	byAddr := map[netip.Addr]int{}
	for i, node := range out {
		if !node.Addr.IsValid() {
			out[i].Addr = names[strings.ToLower(node.Entry)]
		}
		addr := out[i].Addr
		if !addr.IsValid() {
			continue
		}
		if prev, dup := byAddr[addr]; dup {
			return nil, &ConfigError{File: nodesFile, Line: node.Line, Text: node.Entry,
				Reason: fmt.Sprintf("resolves to %s, like line %d", addr, prev)}
		}
		byAddr[addr] = node.Line
	}
	return out, nil
}

// parseHosts maps the names in wanted (lower case) that the hosts file lists to their addresses.
// Lines that mention none of them are not checked: a hosts file holds other entries too.
func parseHosts(file string, data []byte, wanted map[string]int) (map[string]netip.Addr, error) {
	names := map[string]netip.Addr{}
	mappedOn := map[string]int{}
	for i, raw := range splitLines(data) {
		n := i + 1
		content, _, _ := strings.Cut(raw, "#")
		fields := strings.Fields(content)
		if len(fields) < 2 {
			continue
		}
		var listed []string
		for _, name := range fields[1:] {
			if _, ok := wanted[strings.ToLower(name)]; ok {
				listed = append(listed, strings.ToLower(name))
			}
		}
		if len(listed) == 0 {
			continue
		}
		addr, err := netip.ParseAddr(fields[0])
		if err != nil {
			return nil, &ConfigError{File: file, Line: n, Text: raw, Reason: "invalid IP address"}
		}
		for _, name := range listed {
			if prev, dup := mappedOn[name]; dup {
				return nil, &ConfigError{File: file, Line: n, Text: raw,
					Reason: fmt.Sprintf("%s already mapped on line %d", name, prev)}
			}
			mappedOn[name] = n
			names[name] = addr
		}
	}
	return names, nil
}

func looksLikeAddr(s string) bool {
	return strings.Contains(s, ":") || strings.Trim(s, "0123456789.") == ""
}

// validHostname reports whether s is an RFC 1123 host name.
func validHostname(s string) bool {
	if len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '-' {
				return false
			}
		}
	}
	return true
}
