// Package daemon is the per-node ComputeDomain daemon: it labels its pod with its clique (its only
// API write), watches its clique (or its domain's status.nodes when the domain keeps no
// cliques), writes the IMEX configuration once its entry and index appear, and runs and
// supervises IMEX. Its check subcommand answers from IMEX's readiness query.
package daemon

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// Config is the daemon's identity and settings, read from its environment the way the original
// daemon reads them.
type Config struct {
	NodeName     string
	PodIP        string
	PodName      string
	PodNamespace string
	PodUID       string
	// CliqueID is "<clusterUUID>.<cliqueId>", or empty on a node without an NVLink fabric.
	CliqueID    string
	CDUID       string
	CDName      string
	CDNamespace string
	// MaxNodes is MAX_NODES_PER_IMEX_DOMAIN.
	MaxNodes     int
	LogVerbosity int

	// DNSNames selects nodes.cfg with static names and a hosts file (IMEXDaemonsWithDNSNames).
	DNSNames bool
	// ConfigDir holds the IMEX config files (imexd.cfg, nodes.cfg).
	ConfigDir string
	// HostsPath is the hosts file peer names resolve through.
	HostsPath string
}

// identityVars are required; each names what it carries for the error message.
var identityVars = []struct{ name, what string }{
	{"NODE_NAME", "the node's name (downward API spec.nodeName)"},
	{"POD_IP", "the pod's IP (downward API status.podIP)"},
	{"POD_NAME", "the pod's name (downward API metadata.name)"},
	{"POD_NAMESPACE", "the pod's namespace (downward API metadata.namespace)"},
	{"POD_UID", "the pod's UID (downward API metadata.uid)"},
	{"COMPUTE_DOMAIN_UUID", "the ComputeDomain's UID"},
	{"COMPUTE_DOMAIN_NAME", "the ComputeDomain's name"},
	{"COMPUTE_DOMAIN_NAMESPACE", "the ComputeDomain's namespace"},
}

// ConfigFromEnv reads the daemon's identity from lookup (os.LookupEnv in production). A missing
// identity variable is an error naming it. CLIQUE_ID must be present but may be empty (no
// fabric); cliqueFallback supplies it when absent (clique discovery on the node), and may be nil.
func ConfigFromEnv(lookup func(string) (string, bool), cliqueFallback func() (string, error)) (Config, error) {
	get := func(name string) string { v, _ := lookup(name); return strings.TrimSpace(v) }
	for _, v := range identityVars {
		if get(v.name) == "" {
			return Config{}, fmt.Errorf("environment variable %s is not set: it must hold %s", v.name, v.what)
		}
	}
	c := Config{
		NodeName: get("NODE_NAME"), PodIP: get("POD_IP"), PodName: get("POD_NAME"),
		PodNamespace: get("POD_NAMESPACE"), PodUID: get("POD_UID"),
		CDUID: get("COMPUTE_DOMAIN_UUID"), CDName: get("COMPUTE_DOMAIN_NAME"), CDNamespace: get("COMPUTE_DOMAIN_NAMESPACE"),
		MaxNodes: 18, ConfigDir: "/etc/nvidia-imex", HostsPath: "/etc/hosts", DNSNames: true,
	}
	if clique, ok := lookup("CLIQUE_ID"); ok {
		c.CliqueID = strings.TrimSpace(clique)
	} else if cliqueFallback != nil {
		id, err := cliqueFallback()
		if err != nil {
			return Config{}, fmt.Errorf("CLIQUE_ID is not set and discovering the clique failed: %w", err)
		}
		c.CliqueID = id
	} else {
		return Config{}, fmt.Errorf("environment variable CLIQUE_ID is not set: it must hold the node's clique id (empty without an NVLink fabric)")
	}
	if v := get("MAX_NODES_PER_IMEX_DOMAIN"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 256 {
			return Config{}, fmt.Errorf("MAX_NODES_PER_IMEX_DOMAIN=%q: want an integer between 1 and 256", v)
		}
		c.MaxNodes = n
	}
	if v := get("LOG_VERBOSITY"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return Config{}, fmt.Errorf("LOG_VERBOSITY=%q: want a non-negative integer", v)
		}
		c.LogVerbosity = n
	}
	if v := get("IMEX_CONFIG_DIR"); v != "" {
		c.ConfigDir = v
	}
	if v := get("IMEX_HOSTS_FILE"); v != "" {
		c.HostsPath = v
	}
	return c, nil
}

// CliqueObjectName is the name of this daemon's clique object.
func (c Config) CliqueObjectName() string { return c.CDUID + "." + c.CliqueID }

// IMEXConfigPath is the imexd config file.
func (c Config) IMEXConfigPath() string { return filepath.Join(c.ConfigDir, "imexd.cfg") }

// NodesConfigPath is nodes.cfg.
func (c Config) NodesConfigPath() string { return filepath.Join(c.ConfigDir, "nodes.cfg") }
