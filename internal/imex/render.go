package imex

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	cdv1beta1 "cdplane/api/v1beta1"
)

const (
	// DefaultMaxNodes is the largest number of nodes in one IMEX domain (an NVL72 rack holds 18
	// compute nodes). In DNS-names mode nodes.cfg always lists this many names.
	DefaultMaxNodes = cdv1beta1.DefaultMaxNodesPerIMEXDomain
	// DefaultServerPort is the TCP port IMEX daemons use to talk to each other (SERVER_PORT).
	DefaultServerPort = 50000
	// DefaultCmdPort is the TCP port of IMEX's command service (IMEX_CMD_PORT), which the
	// readiness query talks to.
	DefaultCmdPort = 50005
	// legacyNamePrefix starts the IMEX names NVIDIA's driver and earlier cdplane versions used
	// (compute-domain-daemon-%04d, the same in every domain). Hosts lines naming them are still
	// recognised as this package's, so that an upgraded daemon replaces them.
	legacyNamePrefix = "compute-domain-daemon-"
	// namePrefix starts every IMEX name this package hands out; see NamePrefix.
	namePrefix = "cd-"
	// domainHashLen is how many hex digits of the domain UID's SHA-256 an IMEX name carries.
	domainHashLen = 12

	// hostsMarker heads the block of peer mappings this package writes into a hosts file.
	hostsMarker = "# cdplane: IMEX peer names (managed, rewritten on membership change)"
)

// Peer is one member of a clique as IMEX needs to know it.
type Peer struct {
	// NodeName names the Kubernetes node; used in error messages only.
	NodeName string
	// IPAddress is the peer's pod address, where its IMEX daemon listens.
	IPAddress string
	// Index is the peer's stable index within its clique, 0 <= Index < MaxNodes.
	Index int
}

// Settings says how to render IMEX's configuration and where the files go.
type Settings struct {
	// DNSNames selects DNS-names mode (feature gate IMEXDaemonsWithDNSNames): nodes.cfg lists
	// the domain's names Name(0..MaxNodes-1) and the hosts file maps every one of them: present
	// peers' names to their addresses, the others to their slot's SentinelAddr. Off, nodes.cfg
	// lists peer addresses.
	DNSNames bool
	// DomainUID is the ComputeDomain's UID; the IMEX names derive from it (NamePrefix), so
	// that two domains' IMEX daemons never share a node list and so never accept each other.
	// Required in DNS-names mode.
	DomainUID string
	// MaxNodes is the number of names in nodes.cfg in DNS-names mode and the bound on indexes;
	// zero means DefaultMaxNodes.
	MaxNodes int
	// BindIP is this node's pod address: IMEX_CMD_BIND_INTERFACE_IP, where the readiness
	// query reaches the command service. BIND_INTERFACE_IP stays empty, as NVIDIA's daemon
	// leaves it: IMEX then takes as its own address the node list entry that is one of its
	// interfaces' addresses.
	BindIP string
	// ServerPort is SERVER_PORT; zero means DefaultServerPort.
	ServerPort int
	// CmdPort is IMEX_CMD_PORT; zero means DefaultCmdPort.
	CmdPort int
	// LogFile is LOG_FILE_NAME; empty makes IMEX log to stderr.
	LogFile string

	// IMEXConfigPath is where the imexd config goes (nvidia-imex -c PATH).
	IMEXConfigPath string
	// NodesConfigPath is where nodes.cfg goes (IMEX_NODE_CONFIG_FILE).
	NodesConfigPath string
	// HostsPath is the hosts file that maps peer names to addresses (DNS-names mode only).
	HostsPath string
}

func (s Settings) maxNodes() int   { return cmp.Or(s.MaxNodes, DefaultMaxNodes) }
func (s Settings) serverPort() int { return cmp.Or(s.ServerPort, DefaultServerPort) }
func (s Settings) cmdPort() int    { return cmp.Or(s.CmdPort, DefaultCmdPort) }

// NamePrefix is what every IMEX name of the domain with this UID starts with: "cd-", the first
// 12 hex digits of the UID's SHA-256, and "-". Domains get different names, so an IMEX daemon
// whose hosts file still maps a name to an address that another domain's daemon took over
// meets a daemon with a different node list, which refuses it.
func NamePrefix(domainUID string) string {
	if last := lastPrefix.Load(); last != nil && last.uid == domainUID {
		return last.prefix
	}
	sum := sha256.Sum256([]byte(domainUID))
	p := &uidPrefix{uid: domainUID, prefix: namePrefix + hex.EncodeToString(sum[:])[:domainHashLen] + "-"}
	lastPrefix.Store(p)
	return p.prefix
}

// lastPrefix is the last prefix NamePrefix computed: a daemon renders every name of its domain
// (up to MaxNodes of them) on each change, always for the one domain it serves.
var lastPrefix atomic.Pointer[uidPrefix]

type uidPrefix struct{ uid, prefix string }

// Name is the IMEX name of the clique member with the given index in this domain.
func (s Settings) Name(index int) string {
	return fmt.Sprintf("%s%04d", NamePrefix(s.DomainUID), index)
}

// SentinelPrefix is the block of sentinel addresses: the hosts file maps the name of every
// slot no daemon holds to its own address here (SentinelAddr), so that IMEX resolves every
// name of its node list from the hosts file and none ever reaches cluster DNS. They are
// loopback addresses inside the daemon pod's own network namespace, where nothing listens on
// IMEX's port (IMEX binds its pod address), so a connection to one is refused at once and
// never leaves the pod. One address per slot: a node list whose names resolve to one shared
// address would name a node twice.
var SentinelPrefix = netip.MustParsePrefix("127.127.0.0/16")

// maxSentinels is how many slots SentinelPrefix has addresses for (.0.0 is left out).
const maxSentinels = 1<<16 - 1

// SentinelAddr is the sentinel address of the slot with the given index, 0 <= index <
// 65535: SentinelPrefix's address index+1.
func SentinelAddr(index int) netip.Addr {
	n := index + 1
	return netip.AddrFrom4([4]byte{127, 127, byte(n >> 8), byte(n)})
}

// isIMEXName reports whether name is an IMEX name this package hands out, or handed out before
// (the legacy shape): a prefix, then at least four digits.
func isIMEXName(name string) bool {
	var digits string
	switch rest, ok := strings.CutPrefix(name, namePrefix); {
	case ok:
		hash, tail, found := strings.Cut(rest, "-")
		if !found || len(hash) != domainHashLen || strings.Trim(hash, "0123456789abcdef") != "" {
			return false
		}
		digits = tail
	default:
		if digits, ok = strings.CutPrefix(name, legacyNamePrefix); !ok {
			return false
		}
	}
	if len(digits) < 4 {
		return false
	}
	_, err := strconv.ParseUint(digits, 10, 32)
	return err == nil
}

func validateSettings(s Settings) error {
	if s.MaxNodes < 0 {
		return fmt.Errorf("max nodes per IMEX domain %d: must not be negative", s.MaxNodes)
	}
	if s.ServerPort < 0 || s.ServerPort > 65535 {
		return fmt.Errorf("server port %d: must be between 0 and 65535", s.ServerPort)
	}
	if s.CmdPort < 0 || s.CmdPort > 65535 {
		return fmt.Errorf("command port %d: must be between 0 and 65535", s.CmdPort)
	}
	if _, err := netip.ParseAddr(s.BindIP); err != nil {
		return fmt.Errorf("bind address %q: %w", s.BindIP, err)
	}

	if strings.ContainsAny(s.NodesConfigPath+s.LogFile, "\r\n") {
		return fmt.Errorf("paths must not contain line breaks")
	}
	return nil
}

// validateNames checks what DNS-names mode needs to name the slots.
func validateNames(s Settings) error {
	if !s.DNSNames {
		return nil
	}
	if s.MaxNodes < 0 || s.maxNodes() > maxSentinels {
		return fmt.Errorf("max nodes per IMEX domain %d: must be between 1 and %d in DNS-names mode (one sentinel address per slot)", s.MaxNodes, maxSentinels)
	}
	if s.DomainUID == "" {
		return fmt.Errorf("domain UID is empty: DNS-names mode derives the IMEX names from it")
	}
	return nil
}

// checkPeers validates peers for the given settings and returns them sorted by index, then
// address. Every peer needs a valid, unique address; in DNS-names mode also a unique index
// below MaxNodes.
func checkPeers(s Settings, peers []Peer) ([]Peer, error) {
	sorted := slices.Clone(peers)
	slices.SortFunc(sorted, func(a, b Peer) int {
		return cmp.Or(cmp.Compare(a.Index, b.Index), cmp.Compare(a.IPAddress, b.IPAddress))
	})
	byIP := map[netip.Addr]string{}
	byIndex := map[int]string{}
	for _, p := range sorted {
		ip, err := netip.ParseAddr(p.IPAddress)
		if err != nil {
			return nil, fmt.Errorf("peer %s: address %q: %w", p.NodeName, p.IPAddress, err)
		}
		if SentinelPrefix.Contains(ip) {
			return nil, fmt.Errorf("peer %s: address %s is in the sentinel block %s", p.NodeName, ip, SentinelPrefix)
		}
		if other, dup := byIP[ip]; dup {
			return nil, fmt.Errorf("peers %s and %s share address %s", other, p.NodeName, ip)
		}
		byIP[ip] = p.NodeName
		if !s.DNSNames {
			continue
		}
		if p.Index < 0 || p.Index >= s.maxNodes() {
			return nil, fmt.Errorf("peer %s: index %d out of range [0, %d)", p.NodeName, p.Index, s.maxNodes())
		}
		if other, dup := byIndex[p.Index]; dup {
			return nil, fmt.Errorf("peers %s and %s share index %d", other, p.NodeName, p.Index)
		}
		byIndex[p.Index] = p.NodeName
	}
	return sorted, nil
}

// RenderNodesConfig renders nodes.cfg. In DNS-names mode it lists Name(0..MaxNodes-1) and
// does not depend on the peers at all (they are only validated): membership changes touch the
// hosts file only. Otherwise it lists the peers' addresses, one a line, sorted by index.
func RenderNodesConfig(s Settings, peers []Peer) ([]byte, error) {
	if err := validateNames(s); err != nil {
		return nil, err
	}
	sorted, err := checkPeers(s, peers)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if s.DNSNames {
		for i := range s.maxNodes() {
			b.WriteString(s.Name(i) + "\n")
		}
		return b.Bytes(), nil
	}
	for _, p := range sorted {
		b.WriteString(p.IPAddress + "\n")
	}
	return b.Bytes(), nil
}

// RenderHosts renders the hosts file for DNS-names mode: the lines of existing (the current
// file, which may be nil) that do not mention an IMEX name are kept as they are, then a marker
// comment and one "<ip>\t<name>" line per slot 0..MaxNodes-1: a peer's address for the slot of
// its index, the slot's SentinelAddr for a slot no peer holds (a peer that left is not left
// mapped to its old address). Rendering its own output again with the same peers gives the
// same bytes.
func RenderHosts(existing []byte, s Settings, peers []Peer) ([]byte, error) {
	if !s.DNSNames {
		return nil, fmt.Errorf("hosts file is only used in DNS-names mode")
	}
	if err := validateNames(s); err != nil {
		return nil, err
	}
	sorted, err := checkPeers(s, peers)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	for _, line := range splitLines(existing) {
		if ownedHostsLine(line) {
			continue
		}
		b.WriteString(line + "\n")
	}
	b.WriteString(hostsMarker + "\n")
	byIndex := make(map[int]string, len(sorted))
	for _, p := range sorted {
		byIndex[p.Index] = p.IPAddress
	}
	for i := range s.maxNodes() {
		addr, ok := byIndex[i]
		if !ok {
			addr = SentinelAddr(i).String()
		}
		fmt.Fprintf(&b, "%s\t%s\n", addr, s.Name(i))
	}
	return b.Bytes(), nil
}

// ownedHostsLine reports whether a hosts line is ours: the marker, or a mapping that names an
// IMEX peer, in any case: names resolve regardless of case (RFC 4343, as glibc's hosts lookup
// and ParseNodes compare them), so a mapping of an IMEX name in capitals, kept, would map that
// name before the marker's block does.
func ownedHostsLine(line string) bool {
	if strings.TrimSpace(line) == hostsMarker {
		return true
	}
	content, _, _ := strings.Cut(line, "#")
	fields := strings.Fields(content)
	return len(fields) > 1 && slices.ContainsFunc(fields[1:], func(name string) bool { return isIMEXName(strings.ToLower(name)) })
}

// splitLines splits data into lines without their terminators; a trailing newline does not
// make an empty last line.
func splitLines(data []byte) []string {
	text := strings.TrimSuffix(string(data), "\n")
	if text == "" {
		return nil
	}
	return strings.Split(text, "\n")
}

// RenderIMEXConfig renders the imexd config that nvidia-imex reads with -c. IMEX runs in the
// foreground (DAEMONIZE=0) so that its supervisor owns the process, finds its own address in
// the node list (BIND_INTERFACE_IP empty, as NVIDIA's daemon leaves it), and enables the
// command service on the node's pod address for the readiness query.
func RenderIMEXConfig(s Settings) ([]byte, error) {
	if err := validateSettings(s); err != nil {
		return nil, err
	}
	if s.NodesConfigPath == "" {
		return nil, fmt.Errorf("nodes config path is empty")
	}
	kv := []struct{ key, value string }{
		{"LOG_LEVEL", "4"},
		{"LOG_FILE_NAME", s.LogFile},
		{"LOG_APPEND_TO_LOG", "1"},
		{"DAEMONIZE", "0"},
		{"BIND_INTERFACE_IP", ""},
		{"SERVER_PORT", strconv.Itoa(s.serverPort())},
		{"IMEX_NODE_CONFIG_FILE", s.NodesConfigPath},
		{"IMEX_WAIT_FOR_QUORUM", "RECOVERY"},
		{"IMEX_CMD_ENABLED", "1"},
		{"IMEX_CMD_BIND_INTERFACE_IP", s.BindIP},
		{"IMEX_CMD_PORT", strconv.Itoa(s.cmdPort())},
	}
	// Every other key NVIDIA's driver pins, at its value, so that a changed IMEX default
	// never changes cdplane's daemons: logging, no network interface of its own choosing,
	// authentication and encryption off (the pod network is the domain's), no Unix command
	// socket (the readiness query uses the TCP port), and a disconnected node kept forever.
	kv = append(kv, []struct{ key, value string }{
		{"STATS_FILE_NAME", "/var/log/nvidia-imex-stats.log"},
		{"LOG_FILE_MAX_SIZE", "1024"},
		{"LOG_MAX_ROTATE_COUNT", "10"},
		{"LOG_USE_SYSLOG", "0"},
		{"NETWORK_INTERFACE", ""},
		{"IMEX_ENABLE_AUTH_ENCRYPTION", "0"},
		{"IMEX_AUTH_ENCRYPTION_MODE", "SSL_TLS"},
		{"IMEX_AUTH_SOURCE", ""},
		{"IMEX_SERVER_KEY", ""},
		{"IMEX_SERVER_CERT", ""},
		{"IMEX_SERVER_CERT_AUTH", ""},
		{"IMEX_CLIENT_KEY", ""},
		{"IMEX_CLIENT_CERT", ""},
		{"IMEX_CLIENT_CERT_AUTH", ""},
		{"IMEX_SECURITY_TARGET_OVERRIDE", ""},
		{"IMEX_GSS_SERVICE_NAME", "host"},
		{"IMEX_GSS_TIMEOUT_SEC", "30"},
		{"IMEX_GSS_RETRY_INTERVAL_SEC", "5"},
		{"IMEX_GSS_SEC_CONTEXT_LIFETIME_SEC", "-1"},
		{"IMEX_GSS_SHUTDOWN_ON_FAILURE", "0"},
		{"IMEX_CMD_UNIX_DOMAIN_PATH", ""},
		{"IMEX_NODE_DISCONNECTED_GRACE_TIME", "-1"},
	}...)
	var b bytes.Buffer
	b.WriteString("# IMEX daemon configuration, written by the ComputeDomain daemon.\n")
	for _, e := range kv {
		fmt.Fprintf(&b, "%s=%s\n", e.key, e.value)
	}
	return b.Bytes(), nil
}
