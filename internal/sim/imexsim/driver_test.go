package imexsim

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"cdplane/internal/imex"
)

func TestKernelDriverVersion(t *testing.T) {
	cases := map[string]struct {
		data   string
		want   string
		wantOK bool
	}{
		"open kernel module": {
			data: "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.82.07  Release Build  " +
				"(dvs-builder@U16-I3-B03-4-3)  Tue Jul 29 00:00:00 UTC 2025\nGCC version:  gcc version 13.3.0\n",
			want: "580.82.07", wantOK: true,
		},
		"proprietary module": {
			data: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.133.20  Fri Mar 14 2025\n",
			want: "570.133.20", wantOK: true,
		},
		"no NVRM line":       {data: "GCC version:  gcc version 13.3.0\n"},
		"no version on it":   {data: "NVRM version: NVIDIA UNIX Kernel Module x.y\n"},
		"empty":              {},
		"single number only": {data: "NVRM version: NVIDIA 580\n"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := kernelDriverVersion([]byte(tc.data))
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("kernelDriverVersion = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestCompareVersions(t *testing.T) {
	cases := map[string]struct {
		a, b string
		want int
	}{
		"older patch":         {a: "570.158.00", b: "570.158.01", want: -1},
		"same, leading zero":  {a: "570.158.1", b: "570.158.01", want: 0},
		"newer minor":         {a: "570.172.08", b: "570.158.01", want: 1},
		"older major":         {a: "565.57.01", b: "570.158.01", want: -1},
		"newer major":         {a: "580.82.07", b: "570.158.01", want: 1},
		"missing number is 0": {a: "570.158", b: "570.158.01", want: -1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := compareVersions(tc.a, tc.b); got != tc.want {
				t.Errorf("compareVersions(%s, %s) = %d, want %d", tc.a, tc.b, got, tc.want)
			}
		})
	}
}

// TestSimDriverVersionForNames checks that a node list with host names is refused at start
// when the node's loaded driver predates MinHostnameDriverVersion, naming both versions, and
// accepted otherwise: with addresses only, a newer driver, or no version file to read.
func TestSimDriverVersionForNames(t *testing.T) {
	t.Parallel()
	versionFile := func(v string) string {
		return "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  " + v + "  Release Build  " +
			"(dvs-builder@U16-I3-B03-4-3)  Tue Jul 29 00:00:00 UTC 2025\n"
	}
	cases := map[string]struct {
		dnsNames  bool
		version   string // the version file's content; none when empty
		noNodeDir bool
		want      func(n *testNode, nodeDir string) *imex.ConfigError
	}{
		"names on an old driver": {
			dnsNames: true, version: versionFile("565.57.01"),
			want: func(n *testNode, nodeDir string) *imex.ConfigError {
				return &imex.ConfigError{File: n.settings.NodesConfigPath, Line: 1, Text: testName(0),
					Reason: "host names in the node list need NVIDIA driver 570.158.01 or later, but the loaded " +
						"driver is 565.57.01 (" + filepath.Join(nodeDir, DriverVersionPath) + ")"}
			},
		},
		"names on the first driver that takes them": {dnsNames: true, version: versionFile("570.158.01")},
		"names on a current driver":                 {dnsNames: true, version: versionFile("580.82.07")},
		"addresses on an old driver":                {version: versionFile("565.57.01")},
		"names, no version file":                    {dnsNames: true},
		"names, unreadable version":                 {dnsNames: true, version: "garbage\n"},
		"names, no node directory":                  {dnsNames: true, noNodeDir: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n := newTestNodes(t, tc.dnsNames, "127.0.0.89")[0]
			n.write(t, peersOf(n))
			var nodeDir string
			if !tc.noNodeDir {
				nodeDir = n.withNodeDir(t)
			}
			if tc.version != "" {
				path := filepath.Join(nodeDir, DriverVersionPath)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(tc.version), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			sim := New(n.options(t))
			_, err := sim.Start(withTimeout(t))
			if tc.want == nil {
				checkConfigErr(t, err, nil)
				if err := sim.Stop(context.Background()); err != nil {
					t.Fatalf("Stop: %v", err)
				}
				return
			}
			checkConfigErr(t, err, tc.want(n, nodeDir))
			checkListenersGone(t, n)
		})
	}
}
