package imex

import (
	"errors"
	"net/netip"
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

func TestParseIMEXConfig(t *testing.T) {
	cases := map[string]struct {
		data    string
		want    DaemonConfig
		wantErr *ConfigError
	}{
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
	for name, tc := range cases {
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

func TestParseNodes(t *testing.T) {
	cases := map[string]struct {
		nodes   string
		hosts   string
		want    []Node
		wantErr *ConfigError
	}{
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
	for name, tc := range cases {
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
