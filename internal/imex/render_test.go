package imex

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/wait"
)

// testUID is the domain UID the DNS-names tests render for.
const testUID = "8c3f1d2e-0000-4000-8000-000000000001"

func names(from, to int) string {
	s := Settings{DomainUID: testUID}
	var b strings.Builder
	for i := from; i < to; i++ {
		b.WriteString(s.Name(i) + "\n")
	}
	return b.String()
}

// mapped renders the hosts block for maxNodes slots: the given index -> address mappings, the
// slot's sentinel for every other slot.
func mapped(maxNodes int, addrs map[int]string) string {
	s := Settings{DomainUID: testUID}
	var b strings.Builder
	b.WriteString(hostsMarker + "\n")
	for i := range maxNodes {
		addr, ok := addrs[i]
		if !ok {
			addr = SentinelAddr(i).String()
		}
		b.WriteString(addr + "\t" + s.Name(i) + "\n")
	}
	return b.String()
}

func TestNames(t *testing.T) {
	a, b := Settings{DomainUID: "uid-a"}, Settings{DomainUID: "uid-b"}
	if got := a.Name(7); !isIMEXName(got) || len(got) != len("cd-")+12+len("-0007") || !strings.HasSuffix(got, "-0007") {
		t.Errorf("Name(7) = %q: want cd-<12 hex digits>-0007", got)
	}
	if a.Name(0) == b.Name(0) {
		t.Errorf("two domains share the IMEX name %q", a.Name(0))
	}
	if a.Name(3) != (Settings{DomainUID: "uid-a"}).Name(3) {
		t.Error("the name of one domain's slot is not stable")
	}
	for name, want := range map[string]bool{
		"compute-domain-daemon-0003": true, // legacy: still ours, replaced on upgrade
		a.Name(12345):                true,
		"compute-domain-daemon-x":    false,
		"cd-0123456789ab-12":         false,
		"cd-0123456789AB-0001":       false,
		"cd-0123456789a-0001":        false,
		"my-host":                    false,
	} {
		if got := isIMEXName(name); got != want {
			t.Errorf("isIMEXName(%q) = %v, want %v", name, got, want)
		}
	}
	seen := map[string]bool{}
	for i := range 1<<16 - 1 {
		addr := SentinelAddr(i)
		if !SentinelPrefix.Contains(addr) || seen[addr.String()] || addr == SentinelPrefix.Addr() {
			t.Fatalf("SentinelAddr(%d) = %s: want a unique address of %s other than its first", i, addr, SentinelPrefix)
		}
		seen[addr.String()] = true
	}
}

func TestRenderNodesConfig(t *testing.T) {
	three := []Peer{
		{NodeName: "c", IPAddress: "10.0.0.3", Index: 2},
		{NodeName: "a", IPAddress: "10.0.0.1", Index: 0},
		{NodeName: "b", IPAddress: "10.0.0.2", Index: 1},
	}
	cases := map[string]struct {
		settings Settings
		peers    []Peer
		want     string
		wantErr  string
	}{
		"DNS names: every name up to the default maximum": {
			settings: Settings{DNSNames: true, DomainUID: testUID},
			peers:    three,
			want:     names(0, 18),
		},
		"DNS names: the list does not depend on membership": {
			settings: Settings{DNSNames: true, DomainUID: testUID, MaxNodes: 4},
			peers:    three[:1],
			want:     names(0, 4),
		},
		"DNS names: no peers yet": {
			settings: Settings{DNSNames: true, DomainUID: testUID, MaxNodes: 2},
			want:     names(0, 2),
		},
		"DNS names: no domain UID": {
			settings: Settings{DNSNames: true, MaxNodes: 2},
			wantErr:  "domain UID is empty",
		},
		"DNS names: more slots than sentinel addresses": {
			settings: Settings{DNSNames: true, DomainUID: testUID, MaxNodes: 1 << 16},
			wantErr:  "must be between 1 and 65535",
		},
		"DNS names: index at the maximum": {
			settings: Settings{DNSNames: true, DomainUID: testUID, MaxNodes: 2},
			peers:    three,
			wantErr:  "peer c: index 2 out of range [0, 2)",
		},
		"DNS names: negative index": {
			settings: Settings{DNSNames: true, DomainUID: testUID},
			peers:    []Peer{{NodeName: "a", IPAddress: "10.0.0.1", Index: -1}},
			wantErr:  "peer a: index -1 out of range [0, 18)",
		},
		"DNS names: two peers with one index": {
			settings: Settings{DNSNames: true, DomainUID: testUID},
			peers:    []Peer{{NodeName: "a", IPAddress: "10.0.0.1", Index: 1}, {NodeName: "b", IPAddress: "10.0.0.2", Index: 1}},
			wantErr:  "peers a and b share index 1",
		},
		"addresses: sorted by index": {
			peers: three,
			want:  "10.0.0.1\n10.0.0.2\n10.0.0.3\n",
		},
		"addresses: index order, not address order": {
			peers: []Peer{{NodeName: "a", IPAddress: "10.0.0.9", Index: 0}, {NodeName: "b", IPAddress: "10.0.0.1", Index: 1}},
			want:  "10.0.0.9\n10.0.0.1\n",
		},
		"addresses: no peers": {
			want: "",
		},
		"addresses: invalid address": {
			peers:   []Peer{{NodeName: "a", IPAddress: "10.0.0.300", Index: 0}},
			wantErr: `peer a: address "10.0.0.300"`,
		},
		"addresses: a peer in the sentinel block": {
			peers:   []Peer{{NodeName: "a", IPAddress: "127.127.0.3", Index: 0}},
			wantErr: "peer a: address 127.127.0.3 is in the sentinel block",
		},
		"addresses: two peers with one address": {
			peers:   []Peer{{NodeName: "a", IPAddress: "10.0.0.1", Index: 0}, {NodeName: "b", IPAddress: "10.0.0.1", Index: 1}},
			wantErr: "peers a and b share address 10.0.0.1",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := RenderNodesConfig(tc.settings, tc.peers)
			checkErr(t, err, tc.wantErr)
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("nodes.cfg (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRenderHosts(t *testing.T) {
	dns := Settings{DNSNames: true, DomainUID: testUID, MaxNodes: 3}
	kubelet := "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n10.1.0.5\tdaemon-pod\n"
	cases := map[string]struct {
		existing string
		settings Settings
		peers    []Peer
		want     string
		wantErr  string
	}{
		"new file": {
			settings: dns,
			peers:    []Peer{{IPAddress: "10.0.0.2", Index: 1}, {IPAddress: "10.0.0.1", Index: 0}},
			want:     mapped(3, map[int]string{0: "10.0.0.1", 1: "10.0.0.2"}),
		},
		"every slot of the default maximum is mapped": {
			settings: Settings{DNSNames: true, DomainUID: testUID},
			peers:    []Peer{{IPAddress: "10.0.0.5", Index: 4}},
			want:     mapped(18, map[int]string{4: "10.0.0.5"}),
		},
		"keeps the kubelet's lines": {
			existing: kubelet,
			settings: dns,
			peers:    []Peer{{IPAddress: "10.0.0.1", Index: 0}},
			want:     kubelet + mapped(3, map[int]string{0: "10.0.0.1"}),
		},
		"replaces earlier mappings, wherever they are": {
			existing: "127.0.0.1 localhost\n10.9.9.9 compute-domain-daemon-0003 # stale\n" + hostsMarker +
				"\n10.0.0.1\tcompute-domain-daemon-0000\n10.0.0.2\tcompute-domain-daemon-0001\n",
			settings: dns,
			peers:    []Peer{{IPAddress: "10.0.0.1", Index: 0}},
			want:     "127.0.0.1 localhost\n" + mapped(3, map[int]string{0: "10.0.0.1"}),
		},
		"another domain's names are replaced": {
			existing: "127.0.0.1 localhost\n" + hostsMarker + "\n10.0.0.1\t" + Settings{DomainUID: "other"}.Name(0) + "\n",
			settings: dns,
			want:     "127.0.0.1 localhost\n" + mapped(3, nil),
		},
		"all peers gone: every name maps to its sentinel, none to a stale address": {
			existing: kubelet + mapped(3, map[int]string{0: "10.0.0.1"}),
			settings: dns,
			want:     kubelet + mapped(3, nil),
		},
		"a look-alike name is not ours": {
			existing: "10.0.0.7 compute-domain-daemon-x\n",
			settings: dns,
			want:     "10.0.0.7 compute-domain-daemon-x\n" + mapped(3, nil),
		},
		"address mode has no hosts file": {
			settings: Settings{},
			wantErr:  "only used in DNS-names mode",
		},
		"bad peer": {
			settings: dns,
			peers:    []Peer{{NodeName: "a", IPAddress: "10.0.0.1", Index: 3}},
			wantErr:  "peer a: index 3 out of range",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := RenderHosts([]byte(tc.existing), tc.settings, tc.peers)
			checkErr(t, err, tc.wantErr)
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("hosts (-want +got):\n%s", diff)
			}
			if err != nil {
				return
			}
			again, err := RenderHosts(got, tc.settings, tc.peers)
			if err != nil {
				t.Fatalf("rendering again: %v", err)
			}
			if diff := cmp.Diff(string(got), string(again)); diff != "" {
				t.Errorf("rendering its own output changed it (-first +second):\n%s", diff)
			}
		})
	}
}

// pinnedKeys end every rendered imexd config: the keys NVIDIA's driver pins, at its values.
const pinnedKeys = `STATS_FILE_NAME=/var/log/nvidia-imex-stats.log
LOG_FILE_MAX_SIZE=1024
LOG_MAX_ROTATE_COUNT=10
LOG_USE_SYSLOG=0
NETWORK_INTERFACE=
IMEX_ENABLE_AUTH_ENCRYPTION=0
IMEX_AUTH_ENCRYPTION_MODE=SSL_TLS
IMEX_AUTH_SOURCE=
IMEX_SERVER_KEY=
IMEX_SERVER_CERT=
IMEX_SERVER_CERT_AUTH=
IMEX_CLIENT_KEY=
IMEX_CLIENT_CERT=
IMEX_CLIENT_CERT_AUTH=
IMEX_SECURITY_TARGET_OVERRIDE=
IMEX_GSS_SERVICE_NAME=host
IMEX_GSS_TIMEOUT_SEC=30
IMEX_GSS_RETRY_INTERVAL_SEC=5
IMEX_GSS_SEC_CONTEXT_LIFETIME_SEC=-1
IMEX_GSS_SHUTDOWN_ON_FAILURE=0
IMEX_CMD_UNIX_DOMAIN_PATH=
IMEX_NODE_DISCONNECTED_GRACE_TIME=-1
`

func TestRenderIMEXConfig(t *testing.T) {
	cases := map[string]struct {
		settings Settings
		want     string
		wantErr  string
	}{
		"defaults": {
			settings: Settings{BindIP: "10.0.0.1", NodesConfigPath: "/imexd/nodes.cfg"},
			want: `# IMEX daemon configuration, written by the ComputeDomain daemon.
LOG_LEVEL=4
LOG_FILE_NAME=
LOG_APPEND_TO_LOG=1
DAEMONIZE=0
BIND_INTERFACE_IP=
SERVER_PORT=50000
IMEX_NODE_CONFIG_FILE=/imexd/nodes.cfg
IMEX_WAIT_FOR_QUORUM=RECOVERY
IMEX_CMD_ENABLED=1
IMEX_CMD_BIND_INTERFACE_IP=10.0.0.1
IMEX_CMD_PORT=50005
` + pinnedKeys,
		},
		"ports and log file": {
			settings: Settings{BindIP: "127.0.0.11", ServerPort: 41000, CmdPort: 41005,
				LogFile: "/var/log/imex.log", NodesConfigPath: "/n.cfg"},
			want: `# IMEX daemon configuration, written by the ComputeDomain daemon.
LOG_LEVEL=4
LOG_FILE_NAME=/var/log/imex.log
LOG_APPEND_TO_LOG=1
DAEMONIZE=0
BIND_INTERFACE_IP=
SERVER_PORT=41000
IMEX_NODE_CONFIG_FILE=/n.cfg
IMEX_WAIT_FOR_QUORUM=RECOVERY
IMEX_CMD_ENABLED=1
IMEX_CMD_BIND_INTERFACE_IP=127.0.0.11
IMEX_CMD_PORT=41005
` + pinnedKeys,
		},
		"no bind address": {
			settings: Settings{NodesConfigPath: "/n.cfg"},
			wantErr:  `bind address ""`,
		},
		"port out of range": {
			settings: Settings{BindIP: "10.0.0.1", ServerPort: 70000, NodesConfigPath: "/n.cfg"},
			wantErr:  "server port 70000",
		},
		"no nodes config path": {
			settings: Settings{BindIP: "10.0.0.1"},
			wantErr:  "nodes config path is empty",
		},
		"a line break would inject a key": {
			settings: Settings{BindIP: "10.0.0.1", NodesConfigPath: "/n.cfg\nSERVER_PORT=1"},
			wantErr:  "line breaks",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := RenderIMEXConfig(tc.settings)
			checkErr(t, err, tc.wantErr)
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("imexd config (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRenderedIMEXConfigParses checks that what the daemon writes is what IMEX (and the
// simulated one) reads back.
func TestRenderedIMEXConfigParses(t *testing.T) {
	data, err := RenderIMEXConfig(Settings{BindIP: "127.0.0.11", CmdPort: 41005, NodesConfigPath: "/n.cfg"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseIMEXConfig("imexd.cfg", data)
	if err != nil {
		t.Fatal(err)
	}
	want := DaemonConfig{
		ServerPort:      DefaultServerPort,
		NodesConfigPath: "/n.cfg",
		CmdEnabled:      true,
		CmdBindIP:       mustAddr("127.0.0.11"),
		CmdPort:         41005,
	}
	if diff := cmp.Diff(want, got, addrComparer); diff != "" {
		t.Errorf("parsed config (-want +got):\n%s", diff)
	}
}

// TestWriteConfig walks a node through membership changes and checks which files change and
// what a running IMEX would need.
func TestWriteConfig(t *testing.T) {
	a := Peer{NodeName: "a", IPAddress: "10.0.0.1", Index: 0}
	b := Peer{NodeName: "b", IPAddress: "10.0.0.2", Index: 1}
	bMoved := Peer{NodeName: "b", IPAddress: "10.0.0.9", Index: 1}
	type step struct {
		peers      []Peer
		maxNodes   int
		want       Changes
		wantAction Action
	}
	cases := map[string]struct {
		dnsNames bool
		steps    []step
	}{
		"DNS names: membership changes touch the hosts file only": {
			dnsNames: true,
			steps: []step{
				{peers: []Peer{a}, want: Changes{IMEXConfig: true, NodesConfig: true, Hosts: true}, wantAction: ActionRestart},
				{peers: []Peer{a}, want: Changes{}, wantAction: ActionNone},
				{peers: []Peer{a, b}, want: Changes{Hosts: true}, wantAction: ActionReload},
				{peers: []Peer{a, bMoved}, want: Changes{Hosts: true}, wantAction: ActionReload},
				{peers: []Peer{a}, want: Changes{Hosts: true}, wantAction: ActionReload},
				{peers: []Peer{a}, maxNodes: 4, want: Changes{NodesConfig: true, Hosts: true}, wantAction: ActionRestart},
			},
		},
		"addresses: membership changes rewrite nodes.cfg": {
			steps: []step{
				{peers: []Peer{a}, want: Changes{IMEXConfig: true, NodesConfig: true}, wantAction: ActionRestart},
				{peers: []Peer{a}, want: Changes{}, wantAction: ActionNone},
				{peers: []Peer{b, a}, want: Changes{NodesConfig: true}, wantAction: ActionRestart},
				{peers: []Peer{a, b}, want: Changes{}, wantAction: ActionNone},
			},
		},
	}
	// Each case runs through WriteConfig and through one ConfigWriter, which must report the
	// same changes while it skips the work for inputs it has just written.
	for name, tc := range cases {
		for _, viaWriter := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/ConfigWriter=%t", name, viaWriter), func(t *testing.T) {
				var w ConfigWriter
				write := WriteConfig
				if viaWriter {
					write = w.Write
				}
				dir := t.TempDir()
				hosts := filepath.Join(dir, "etc", "hosts")
				kubelet := "127.0.0.1\tlocalhost\n"
				if err := os.MkdirAll(filepath.Dir(hosts), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(hosts, []byte(kubelet), 0o644); err != nil {
					t.Fatal(err)
				}
				for i, st := range tc.steps {
					s := Settings{
						DNSNames: tc.dnsNames, DomainUID: testUID, MaxNodes: st.maxNodes, BindIP: "10.0.0.1",
						IMEXConfigPath:  filepath.Join(dir, "imexd", "imexd.cfg"),
						NodesConfigPath: filepath.Join(dir, "imexd", "nodes.cfg"),
						HostsPath:       hosts,
					}
					got, err := write(s, st.peers)
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					if diff := cmp.Diff(st.want, got); diff != "" {
						t.Errorf("step %d: changes (-want +got):\n%s", i, diff)
					}
					if got.Action() != st.wantAction {
						t.Errorf("step %d: action %v, want %v", i, got.Action(), st.wantAction)
					}
				}
				data, err := os.ReadFile(hosts)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.HasPrefix(string(data), kubelet) {
					t.Errorf("hosts file lost the kubelet's lines:\n%s", data)
				}
				if tc.dnsNames == (string(data) == kubelet) {
					t.Errorf("hosts file written in the wrong mode:\n%s", data)
				}
				leftovers, _ := filepath.Glob(filepath.Join(dir, "*", ".*.tmp-*"))
				if len(leftovers) > 0 {
					t.Errorf("temporary files left behind: %v", leftovers)
				}
			})
		}
	}
}

// checkErr fails the test unless err matches want: nil for "", else containing want.
func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want != "" && err == nil:
		t.Fatalf("no error, want one containing %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Fatalf("error %q does not contain %q", err, want)
	}
}

// Stop's grace: the default when unset, none of its own when negative (the daemon's: the pod's
// grace period ends a stop).
func TestStopGrace(t *testing.T) {
	for _, tc := range []struct{ set, want time.Duration }{{0, DefaultStopGrace}, {time.Second, time.Second}, {-1, -1}} {
		if got := (Options{StopGrace: tc.set}).stopGrace(); got != tc.want {
			t.Errorf("StopGrace %s: grace %s, want %s", tc.set, got, tc.want)
		}
	}
}

// TestConfigWriterRepairsFilesChangedBehindIt: the same inputs again write nothing while the
// files stand as written, and rewrite what someone else changed, removed or replaced since,
// even when the change keeps the file's size.
func TestConfigWriterRepairsFilesChangedBehindIt(t *testing.T) {
	dir := t.TempDir()
	s := dnsSettingsIn(dir)
	peers := []Peer{{NodeName: "a", IPAddress: "10.0.0.1", Index: 0}, {NodeName: "b", IPAddress: "10.0.0.2", Index: 1}}
	var w ConfigWriter
	if _, err := w.Write(s, peers); err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for _, p := range configPaths(s) {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		want[p] = data
	}
	check := func(step string, wantChanges Changes) {
		t.Helper()
		got, err := w.Write(s, peers)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if got != wantChanges {
			t.Errorf("%s: changes %+v, want %+v", step, got, wantChanges)
		}
		for p, data := range want {
			if now, err := os.ReadFile(p); err != nil || string(now) != string(data) {
				t.Errorf("%s: %s not as rendered (err %v):\n%s", step, filepath.Base(p), err, now)
			}
		}
	}
	check("same inputs", Changes{})

	// Overwritten in place with the same number of bytes: only the times tell. Kernels before
	// fine-grained timestamps stamp files from a clock that ticks every few milliseconds: the
	// overwrite waits until that clock shows a time after the write (what a daemon's next
	// event, milliseconds to minutes later, always sees).
	waitForNewerFileTimes(t, dir, s.NodesConfigPath)
	same := []byte(strings.Repeat("x", len(want[s.NodesConfigPath])))
	if err := os.WriteFile(s.NodesConfigPath, same, 0o644); err != nil {
		t.Fatal(err)
	}
	check("nodes.cfg overwritten in place", Changes{NodesConfig: true})

	if err := os.Remove(s.IMEXConfigPath); err != nil {
		t.Fatal(err)
	}
	check("imexd.cfg removed", Changes{IMEXConfig: true})

	// Replaced by a rename (a new inode) with the peers' block gone.
	tmp := filepath.Join(dir, "hosts.new")
	if err := os.WriteFile(tmp, []byte("127.0.0.1\tlocalhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, s.HostsPath); err != nil {
		t.Fatal(err)
	}
	want[s.HostsPath] = append([]byte("127.0.0.1\tlocalhost\n"), want[s.HostsPath]...)
	check("hosts file replaced", Changes{Hosts: true})
	check("same inputs after the repairs", Changes{})
}

// BenchmarkWriteConfigUnchanged is what a daemon spends on a clique event that changes nothing
// IMEX reads (another entry turned Ready), through WriteConfig and through a ConfigWriter.
func BenchmarkWriteConfigUnchanged(b *testing.B) {
	dir := b.TempDir()
	s := dnsSettingsIn(dir)
	var peers []Peer
	for i := range DefaultMaxNodes {
		peers = append(peers, Peer{NodeName: fmt.Sprintf("n%02d", i), IPAddress: fmt.Sprintf("10.0.0.%d", i+1), Index: i})
	}
	b.Run("WriteConfig", func(b *testing.B) {
		for b.Loop() {
			if _, err := WriteConfig(s, peers); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ConfigWriter", func(b *testing.B) {
		var w ConfigWriter
		for b.Loop() {
			if _, err := w.Write(s, peers); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// dnsSettingsIn is DNS-names mode with every file in dir.
func dnsSettingsIn(dir string) Settings {
	return Settings{
		DNSNames: true, DomainUID: testUID, BindIP: "10.0.0.1",
		IMEXConfigPath:  filepath.Join(dir, "imexd.cfg"),
		NodesConfigPath: filepath.Join(dir, "nodes.cfg"),
		HostsPath:       filepath.Join(dir, "hosts"),
	}
}

// waitForNewerFileTimes returns once a file written now in dir gets a modification time after
// that of path (polled every millisecond: the coarse file clock ticks every few).
func waitForNewerFileTimes(t *testing.T, dir, path string) {
	t.Helper()
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	probe := filepath.Join(dir, "clock-probe")
	err = wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		if err := os.WriteFile(probe, nil, 0o644); err != nil {
			return false, err
		}
		now, err := os.Stat(probe)
		if err != nil {
			return false, err
		}
		return now.ModTime().After(before.ModTime()), nil
	})
	if err != nil {
		t.Fatalf("file times did not pass %v: %v", before.ModTime(), err)
	}
}

// FuzzRenderHosts: whatever the hosts file already holds (the kubelet's, an earlier daemon's,
// anything), the rendered file keeps the lines that are not IMEX's and maps every name of
// nodes.cfg so that IMEX, reading both as it does (ParseNodes), resolves each slot to its
// peer's address, or to the slot's sentinel; and rendering it again changes nothing.
func FuzzRenderHosts(f *testing.F) {
	kubelet := "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n10.1.0.5\tdaemon-pod\n"
	s := Settings{DNSNames: true, DomainUID: testUID, MaxNodes: 4}
	for _, existing := range []string{
		// Found by this test: names resolve regardless of case (RFC 4343; glibc's hosts lookup,
		// and ParseNodes, as IMEX reads them), so a line naming an IMEX name in capitals is
		// IMEX's to replace too; kept, it mapped the name before the marker's block did.
		"10.9.9.9 " + strings.ToUpper(s.Name(0)) + "\n", "10.9.9.8 COMPUTE-DOMAIN-DAEMON-0001\n",
		"", kubelet, kubelet + mapped(3, map[int]string{0: "10.0.0.1"}),
		"127.0.0.1 localhost\n10.9.9.9 compute-domain-daemon-0003 # stale\n" + hostsMarker + "\n10.0.0.1\tcompute-domain-daemon-0000\n",
		"127.0.0.1 localhost\n" + hostsMarker + "\n10.0.0.1\t" + Settings{DomainUID: "other"}.Name(0) + "\n",
		"10.0.0.7 compute-domain-daemon-x\n", "\n\n", "no-newline", "10.0.0.1 a\r\n", "#" + hostsMarker + "\n",
	} {
		f.Add([]byte(existing))
	}
	peers := []Peer{{NodeName: "n1", IPAddress: "10.0.0.1", Index: 0}, {NodeName: "n3", IPAddress: "10.0.0.3", Index: 2}}
	nodesCfg, err := RenderNodesConfig(s, peers)
	if err != nil {
		f.Fatal(err)
	}
	want := []string{"10.0.0.1", SentinelAddr(1).String(), "10.0.0.3", SentinelAddr(3).String()}
	f.Fuzz(func(t *testing.T, existing []byte) {
		got, err := RenderHosts(existing, s, peers)
		if err != nil {
			t.Fatalf("RenderHosts: %v", err)
		}
		for _, l := range splitLines(existing) {
			if !ownedHostsLine(l) && !strings.Contains(string(got), l+"\n") {
				t.Fatalf("line %q of the existing file was not kept", l)
			}
		}
		again, err := RenderHosts(got, s, peers)
		if err != nil {
			t.Fatalf("rendering again: %v", err)
		}
		if string(again) != string(got) {
			t.Fatalf("rendering its own output changed it:\n%s\n---\n%s", got, again)
		}
		nodes, err := ParseNodes("nodes.cfg", nodesCfg, "hosts", got)
		if err != nil {
			t.Fatalf("IMEX would refuse the files: %v\nhosts:\n%s", err, got)
		}
		for i, n := range nodes {
			if n.Addr.String() != want[i] {
				t.Fatalf("slot %d (%s) resolves to %v, want %s\nhosts:\n%s", i, n.Entry, n.Addr, want[i], got)
			}
		}
	})
}
