// Package daemon is the per-node ComputeDomain daemon: it labels its pod with its clique (its only
// API write), watches its clique (or its domain's status.nodes when the domain keeps no
// cliques), writes the IMEX configuration once its entry and index appear, and runs and
// supervises IMEX. Its check subcommand answers from IMEX's readiness query.
package daemon

import (
	"fmt"
	"path/filepath"
	"time"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/daemonenv"
	"cdplane/internal/imex"
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
	// Cliques says the controller keeps membership in clique objects (ComputeDomainCliques):
	// the daemon then waits for its clique and reads the domain's status.nodes only when its
	// clique went after it had seen it (the gate was turned off), or when it did not come within
	// CliqueWait and the domain does not say its membership is in cliques. Off, it reads the
	// domain's status whenever its clique does not exist.
	Cliques bool
	// CliqueWait is how long, with Cliques, the daemon waits for its clique after labelling its
	// pod before it reads
	// where the domain's controller keeps its membership (and then again as often while that
	// is in cliques); zero: the package's CliqueWait. Tests shorten it.
	CliqueWait time.Duration
	// ConfigDir holds the IMEX config files (imexd.cfg, nodes.cfg).
	ConfigDir string
	// HostsPath is the hosts file peer names resolve through.
	HostsPath string
	// DriverVersion is the node's kernel driver version (from the kubelet plugin); empty when
	// not known.
	DriverVersion string
	// FabricError is why the node serves without a fabric although it has one (its registration
	// failed, from the kubelet plugin); empty otherwise.
	FabricError string
	// HostIMEXService is the kubelet plugin's evidence of an enabled host nvidia-imex service on
	// the node (daemonenv.HostIMEXService); empty when it found none.
	HostIMEXService string
}

// ConfigFromEnv reads the daemon's identity from lookup (os.LookupEnv in production) through the
// daemonenv contract. A missing identity variable is an error naming it. CLIQUE_ID must be
// present but may be empty (no fabric); cliqueFallback supplies it when absent (clique discovery
// on the node), and may be nil.
func ConfigFromEnv(lookup func(string) (string, bool), cliqueFallback func() (string, error)) (Config, error) {
	e, err := daemonenv.Read(lookup)
	if err != nil {
		return Config{}, err
	}
	c := Config{
		NodeName: e.NodeName, PodIP: e.PodIP, PodName: e.PodName, PodNamespace: e.PodNamespace, PodUID: e.PodUID,
		CDUID: e.DomainUID, CDName: e.DomainName, CDNamespace: e.DomainNamespace, CliqueID: e.CliqueID,
		MaxNodes: e.MaxNodesPerIMEXDomain, LogVerbosity: e.LogVerbosity,
		ConfigDir: e.IMEXConfigDir, HostsPath: e.HostsFile, DNSNames: true, DriverVersion: e.DriverVersion, FabricError: e.FabricError,
		HostIMEXService: e.HostIMEXService,
	}
	switch {
	case e.CliqueIDSet:
	case cliqueFallback != nil:
		id, err := cliqueFallback()
		if err != nil {
			return Config{}, fmt.Errorf("%s is not set and discovering the clique failed: %w", daemonenv.CliqueID, err)
		}
		c.CliqueID = id
	default:
		return Config{}, fmt.Errorf("environment variable %s is not set: it must hold the node's clique id (empty without an NVLink fabric)", daemonenv.CliqueID)
	}
	return c, nil
}

// CliqueObjectName is the name of this daemon's clique object.
func (c Config) CliqueObjectName() string { return cdv1beta1.CliqueName(c.CDUID, c.CliqueID) }

// IMEXConfigPath is the imexd config file.
func (c Config) IMEXConfigPath() string { return filepath.Join(c.ConfigDir, "imexd.cfg") }

// NodesConfigPath is nodes.cfg.
func (c Config) NodesConfigPath() string { return filepath.Join(c.ConfigDir, "nodes.cfg") }

// BlockedPath is where the daemon records why IMEX cannot run on this node (a reason retrying
// does not cure), for its readiness check, a separate process, to report.
func (c Config) BlockedPath() string { return filepath.Join(c.ConfigDir, "imex-blocked") }

// useDNSNames decides the IMEX naming mode: names when the IMEXDaemonsWithDNSNames gate is on.
// With the gate on, a node whose driver is known to predate IMEX's support for names in its
// node list is refused, as NVIDIA's driver refuses it: its IMEX would refuse the node list. A
// driver version that cannot be parsed is not refused; the note says so.
func useDNSNames(gate bool, driverVersion string) (bool, string, error) {
	if !gate || driverVersion == "" {
		return gate, "", nil
	}
	ok, err := imex.DriverSupportsHostnames(driverVersion)
	switch {
	case err != nil:
		return true, fmt.Sprintf("cannot tell from driver version %q whether IMEX takes names (%v); using names", driverVersion, err), nil
	case !ok:
		return false, "", fmt.Errorf("feature gate IMEXDaemonsWithDNSNames needs NVIDIA driver %s or later (IMEX takes host names in its node list from that version), but this node runs %s: upgrade the driver, or turn IMEXDaemonsWithDNSNames off (with ComputeDomainCliques off too)",
			imex.HostnamesMinDriverVersion, driverVersion)
	}
	return true, "", nil
}

// cliqueWait is CliqueWait unless the config sets its own.
func (c Config) cliqueWait() time.Duration {
	if c.CliqueWait > 0 {
		return c.CliqueWait
	}
	return CliqueWait
}
