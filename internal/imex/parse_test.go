package imex

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var addrComparer = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// checkConfigErr fails the test unless err is exactly want (nil for no error).
func checkConfigErr(t *testing.T, err error, want *ConfigError) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	var got *ConfigError
	if !errors.As(err, &got) {
		t.Fatalf("error %v is not a *ConfigError; want %v", err, want)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("config error (-want +got):\n%s", diff)
	}
}

// parseIMEXConfigCase is an imexd config and what parsing it (as file "cfg") gives.
type parseIMEXConfigCase struct {
	data    string
	want    DaemonConfig
	wantErr *ConfigError
}

// parseIMEXConfigCases are the table of TestParseIMEXConfig and the seed corpus of
// FuzzParseIMEXConfig.
func parseIMEXConfigCases() map[string]parseIMEXConfigCase {
	return map[string]parseIMEXConfigCase{
		"empty file: the real defaults": {
			want: DaemonConfig{ServerPort: 50000, NodesConfigPath: DefaultNodesConfigPath, Daemonize: true},
		},
		"comments, blanks, spaces and unknown keys": {
			data: "# comment\n\n  SERVER_PORT = 41000 \nIMEX_ENABLE_AUTH_ENCRYPTION=0\nDAEMONIZE=0\n" +
				"IMEX_CMD_ENABLED=1\nIMEX_CMD_PORT=41005\nBIND_INTERFACE_IP=127.0.0.11\nLOG_FILE_NAME=\n",
			want: DaemonConfig{ServerPort: 41000, NodesConfigPath: DefaultNodesConfigPath, CmdEnabled: true,
				CmdPort: 41005, BindIP: mustAddr("127.0.0.11")},
		},
		"command service on a Unix domain socket": {
			data: "IMEX_CMD_ENABLED=1\nIMEX_CMD_UNIX_DOMAIN_PATH=/etc/nvidia-imex/imex_ctrl.sock\n",
			want: DaemonConfig{ServerPort: 50000, NodesConfigPath: DefaultNodesConfigPath, Daemonize: true,
				CmdEnabled: true, CmdUnixPath: "/etc/nvidia-imex/imex_ctrl.sock"},
		},
		"empty Unix domain socket path: unset": {
			data: "IMEX_CMD_UNIX_DOMAIN_PATH=\n",
			want: DaemonConfig{ServerPort: 50000, NodesConfigPath: DefaultNodesConfigPath, Daemonize: true},
		},
		"relative Unix domain socket path": {
			data: "IMEX_CMD_ENABLED=1\nIMEX_CMD_UNIX_DOMAIN_PATH=imex_ctrl.sock\n",
			wantErr: &ConfigError{File: "cfg", Line: 2, Text: "IMEX_CMD_UNIX_DOMAIN_PATH=imex_ctrl.sock",
				Reason: "IMEX_CMD_UNIX_DOMAIN_PATH: must be an absolute path"},
		},
		"not KEY=VALUE": {
			data:    "DAEMONIZE=0\nSERVER_PORT 50000\n",
			wantErr: &ConfigError{File: "cfg", Line: 2, Text: "SERVER_PORT 50000", Reason: "expected KEY=VALUE"},
		},
		"bad key": {
			data:    "server-port=1\n",
			wantErr: &ConfigError{File: "cfg", Line: 1, Text: "server-port=1", Reason: "expected KEY=VALUE"},
		},
		"key twice": {
			data:    "SERVER_PORT=1\n#\nSERVER_PORT=2\n",
			wantErr: &ConfigError{File: "cfg", Line: 3, Text: "SERVER_PORT=2", Reason: "SERVER_PORT already set on line 1"},
		},
		"port out of range": {
			data: "SERVER_PORT=65536\n",
			wantErr: &ConfigError{File: "cfg", Line: 1, Text: "SERVER_PORT=65536",
				Reason: "SERVER_PORT: port must be a number between 0 and 65535"},
		},
		"invalid bind address": {
			data: "BIND_INTERFACE_IP=127.0.0.300\n",
			wantErr: &ConfigError{File: "cfg", Line: 1, Text: "BIND_INTERFACE_IP=127.0.0.300",
				Reason: "BIND_INTERFACE_IP: invalid IP address"},
		},
		"flag not 0 or 1": {
			data:    "IMEX_CMD_ENABLED=yes\n",
			wantErr: &ConfigError{File: "cfg", Line: 1, Text: "IMEX_CMD_ENABLED=yes", Reason: "IMEX_CMD_ENABLED: must be 0 or 1"},
		},
	}
}

func TestParseIMEXConfig(t *testing.T) {
	for name, tc := range parseIMEXConfigCases() {
		t.Run(name, func(t *testing.T) {
			got, err := ParseIMEXConfig("cfg", []byte(tc.data))
			checkConfigErr(t, err, tc.wantErr)
			if tc.wantErr != nil {
				return
			}
			if diff := cmp.Diff(tc.want, got, addrComparer); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

// parseNodesCase is a nodes.cfg and a hosts file, and what parsing them (as "nodes.cfg" and
// "hosts") gives.
type parseNodesCase struct {
	nodes   string
	hosts   string
	want    []Node
	wantErr *ConfigError
}

// parseNodesCases are the table of TestParseNodes and the seed corpus of FuzzParseNodes.
func parseNodesCases() map[string]parseNodesCase {
	return map[string]parseNodesCase{
		"addresses": {
			nodes: "10.0.0.1\n\n# comment\n  fd00::2  \n",
			want: []Node{
				{Line: 1, Entry: "10.0.0.1", Addr: mustAddr("10.0.0.1")},
				{Line: 4, Entry: "fd00::2", Addr: mustAddr("fd00::2")},
			},
		},
		"names, resolved or not": {
			nodes: "compute-domain-daemon-0000\ncompute-domain-daemon-0001\ncompute-domain-daemon-0002\n",
			hosts: "127.0.0.1 localhost\nnot-an-ip unrelated\n10.0.0.1\tcompute-domain-daemon-0000\n" +
				"10.0.0.3 compute-domain-daemon-0002 alias # comment\n",
			want: []Node{
				{Line: 1, Entry: "compute-domain-daemon-0000", Addr: mustAddr("10.0.0.1")},
				{Line: 2, Entry: "compute-domain-daemon-0001"},
				{Line: 3, Entry: "compute-domain-daemon-0002", Addr: mustAddr("10.0.0.3")},
			},
		},
		"unparsable line": {
			nodes:   "10.0.0.1\n10.0.0.2 10.0.0.3\n",
			wantErr: &ConfigError{File: "nodes.cfg", Line: 2, Text: "10.0.0.2 10.0.0.3", Reason: "expected one address or name"},
		},
		"invalid address": {
			nodes:   "10.0.0.1\n10.0.0.300\n",
			wantErr: &ConfigError{File: "nodes.cfg", Line: 2, Text: "10.0.0.300", Reason: "invalid IP address"},
		},
		"invalid IPv6 address": {
			nodes:   "fd00::zz\n",
			wantErr: &ConfigError{File: "nodes.cfg", Line: 1, Text: "fd00::zz", Reason: "invalid IP address"},
		},
		"invalid name": {
			nodes:   "node_1\n",
			wantErr: &ConfigError{File: "nodes.cfg", Line: 1, Text: "node_1", Reason: "invalid name"},
		},
		"duplicate address": {
			nodes:   "10.0.0.1\n10.0.0.2\n10.0.0.1\n",
			wantErr: &ConfigError{File: "nodes.cfg", Line: 3, Text: "10.0.0.1", Reason: "duplicate of line 1"},
		},
		"duplicate name": {
			nodes:   "compute-domain-daemon-0000\nCOMPUTE-DOMAIN-DAEMON-0000\n",
			wantErr: &ConfigError{File: "nodes.cfg", Line: 2, Text: "COMPUTE-DOMAIN-DAEMON-0000", Reason: "duplicate of line 1"},
		},
		"a name resolving to a listed address": {
			nodes: "10.0.0.1\ncompute-domain-daemon-0001\n",
			hosts: "10.0.0.1 compute-domain-daemon-0001\n",
			wantErr: &ConfigError{File: "nodes.cfg", Line: 2, Text: "compute-domain-daemon-0001",
				Reason: "resolves to 10.0.0.1, like line 1"},
		},
		"hosts: listed name with an invalid address": {
			nodes:   "compute-domain-daemon-0000\n",
			hosts:   "127.0.0.1 localhost\n10.0.0.256\tcompute-domain-daemon-0000\n",
			wantErr: &ConfigError{File: "hosts", Line: 2, Text: "10.0.0.256\tcompute-domain-daemon-0000", Reason: "invalid IP address"},
		},
		"hosts: listed name mapped twice": {
			nodes: "compute-domain-daemon-0000\n",
			hosts: "10.0.0.1 compute-domain-daemon-0000\n10.0.0.2 compute-domain-daemon-0000\n",
			wantErr: &ConfigError{File: "hosts", Line: 2, Text: "10.0.0.2 compute-domain-daemon-0000",
				Reason: "compute-domain-daemon-0000 already mapped on line 1"},
		},
	}
}

func TestParseNodes(t *testing.T) {
	for name, tc := range parseNodesCases() {
		t.Run(name, func(t *testing.T) {
			got, err := ParseNodes("nodes.cfg", []byte(tc.nodes), "hosts", []byte(tc.hosts))
			checkConfigErr(t, err, tc.wantErr)
			if diff := cmp.Diff(tc.want, got, addrComparer); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigErrorNamesTheLine(t *testing.T) {
	err := &ConfigError{File: "/imexd/nodes.cfg", Line: 3, Text: "10.0.0.300", Reason: "invalid IP address"}
	want := `/imexd/nodes.cfg:3: "10.0.0.300": invalid IP address`
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
}

// FuzzParseIMEXConfig: whatever an imexd config holds, parsing it never panics, and either
// fails with a *ConfigError naming the file, a line of it and that line as written, or gives a
// config within range (ports 0..65535, a Unix socket path that is absolute or unset), from
// which no key is given twice: the same content with its first setting repeated at the end
// fails, naming the repeat's line and the first.
func FuzzParseIMEXConfig(f *testing.F) {
	for _, tc := range parseIMEXConfigCases() {
		f.Add([]byte(tc.data))
	}
	for _, bad := range []string{"=\n", "A=\r\n", "SERVER_PORT=-0\n", "SERVER_PORT=+1\n", "SERVER_PORT=0x10\n",
		"BIND_INTERFACE_IP=fe80::1%eth0\n", "\n\n# x\n", "A", "  # =\nA=B=C\n", "IMEX_CMD_UNIX_DOMAIN_PATH= /x\n"} {
		f.Add([]byte(bad))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lines := splitLines(data)
		cfg, err := ParseIMEXConfig("cfg", data)
		if err != nil {
			checkNamesALine(t, err, map[string][]string{"cfg": lines})
			return
		}
		for _, p := range []int{cfg.ServerPort, cfg.CmdPort} {
			if p < 0 || p > 65535 {
				t.Fatalf("parsed port %d", p)
			}
		}
		if cfg.CmdUnixPath != "" && !strings.HasPrefix(cfg.CmdUnixPath, "/") {
			t.Fatalf("parsed Unix socket path %q", cfg.CmdUnixPath)
		}
		first := slices.IndexFunc(lines, func(l string) bool {
			l = strings.TrimSpace(l)
			return l != "" && !strings.HasPrefix(l, "#")
		})
		if first < 0 {
			return
		}
		again := strings.TrimSuffix(string(data), "\n") + "\n" + lines[first]
		var ce *ConfigError
		_, err = ParseIMEXConfig("cfg", []byte(again))
		if !errors.As(err, &ce) || ce.Line != len(lines)+1 || !strings.Contains(ce.Reason, fmt.Sprintf("already set on line %d", first+1)) {
			t.Fatalf("the setting of line %d repeated on line %d: %v, want an error naming both", first+1, len(lines)+1, err)
		}
	})
}

// FuzzParseNodes: whatever nodes.cfg and the hosts file hold, parsing them never panics, and
// either fails with a *ConfigError naming one of the two files, a line of it and that line's
// text, or gives one node for every entry line, in order, each its line's text, no entry or
// resolved address twice, and an address entry resolved to itself.
func FuzzParseNodes(f *testing.F) {
	for _, tc := range parseNodesCases() {
		f.Add([]byte(tc.nodes), []byte(tc.hosts))
	}
	for _, bad := range [][2]string{
		{"a\nA\n", ""}, {"::ffff:10.0.0.1\n10.0.0.1\n", ""}, {"n1\nn2\n", "10.0.0.1 n1 n2\n"},
		{"n1\n", "10.0.0.1 n1 N1\n"}, {"n1\n", "# 10.0.0.1 n1\n10.0.0.2 n1 # n1\n"}, {"1.2.3\n", ""},
		{"-a\n", ""}, {"a.\n", ""}, {"fe80::1%eth0\n", ""}, {"n1\r\n", "10.0.0.1 n1\r\n"},
	} {
		f.Add([]byte(bad[0]), []byte(bad[1]))
	}
	f.Fuzz(func(t *testing.T, nodes, hosts []byte) {
		nodeLines := splitLines(nodes)
		got, err := ParseNodes("nodes.cfg", nodes, "hosts", hosts)
		if err != nil {
			checkNamesALine(t, err, map[string][]string{"nodes.cfg": nodeLines, "hosts": splitLines(hosts)})
			return
		}
		var entries []int
		for i, l := range nodeLines {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				entries = append(entries, i+1)
			}
		}
		if len(got) != len(entries) {
			t.Fatalf("%d nodes from %d entry lines", len(got), len(entries))
		}
		seen, addrs := map[string]bool{}, map[netip.Addr]bool{}
		for i, n := range got {
			if n.Line != entries[i] || n.Entry != strings.TrimSpace(nodeLines[n.Line-1]) {
				t.Fatalf("node %d is %+v, want line %d as written", i, n, entries[i])
			}
			key := strings.ToLower(n.Entry)
			if seen[key] {
				t.Fatalf("entry %q twice", n.Entry)
			}
			seen[key] = true
			if a, err := netip.ParseAddr(n.Entry); err == nil && a != n.Addr {
				t.Fatalf("address entry %q resolved to %v", n.Entry, n.Addr)
			}
			if n.Addr.IsValid() {
				if addrs[n.Addr] {
					t.Fatalf("address %v twice", n.Addr)
				}
				addrs[n.Addr] = true
			}
		}
	})
}

// checkNamesALine fails the test unless err is a *ConfigError naming one of files (their lines
// by name), a line of it, and that line's text (as written, or trimmed).
func checkNamesALine(t *testing.T, err error, files map[string][]string) {
	t.Helper()
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v is not a *ConfigError", err)
	}
	lines, ok := files[ce.File]
	if !ok {
		t.Fatalf("error %v names file %q", err, ce.File)
	}
	if ce.Line < 1 || ce.Line > len(lines) {
		t.Fatalf("error %v names line %d of %d", err, ce.Line, len(lines))
	}
	if l := lines[ce.Line-1]; ce.Text != l && ce.Text != strings.TrimSpace(l) {
		t.Fatalf("error %v quotes %q, line %d is %q", err, ce.Text, ce.Line, l)
	}
	if !strings.HasPrefix(ce.Error(), fmt.Sprintf("%s:%d: ", ce.File, ce.Line)) {
		t.Fatalf("error %q does not start with its file and line", ce.Error())
	}
}
