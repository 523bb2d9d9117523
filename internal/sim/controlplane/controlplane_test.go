package controlplane

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// flagValues returns the values of --name in args, in order.
func flagValues(args []string, name string) []string {
	var out []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

func TestAPIServerFlags(t *testing.T) {
	p := pki{dir: "/d/pki"}
	cases := map[string]struct {
		opts Options
		want map[string][]string
	}{
		"sim: all controllers, ServiceAccount admission on": {
			opts: Options{ControllerManager: true, Scheduler: true},
			want: map[string][]string{"authorization-mode": {"Node,RBAC"}, "disable-admission-plugins": nil, "etcd-servers": {"unix:///d/etcd-sockets/client.sock"},
				"anonymous-auth": {"false"}},
		},
		"no kube-controller-manager: nothing creates default ServiceAccounts": {
			opts: Options{},
			want: map[string][]string{"disable-admission-plugins": {"ServiceAccount"}},
		},
		"controllers without serviceaccount": {
			opts: Options{ControllerManager: true, Controllers: []string{"garbagecollector", "daemonset"}},
			want: map[string][]string{"disable-admission-plugins": {"ServiceAccount"}},
		},
		"all but serviceaccount": {
			opts: Options{ControllerManager: true, Controllers: []string{"*", "-serviceaccount-controller"}},
			want: map[string][]string{"disable-admission-plugins": {"ServiceAccount"}},
		},
		"serviceaccount by name": {
			opts: Options{ControllerManager: true, Controllers: []string{"serviceaccount-controller"}},
			want: map[string][]string{"disable-admission-plugins": nil},
		},
		"caller replaces and adds flags": {
			opts: Options{APIServerArgs: map[string][]string{
				"authorization-mode": {"RBAC"}, "--max-requests-inflight": {"800"}, "runtime-config": {"a=true", "b=true"},
			}},
			want: map[string][]string{"authorization-mode": {"RBAC"}, "max-requests-inflight": {"800"}, "runtime-config": {"a=true", "b=true"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			args := apiServerFlags(tc.opts, p, sockets{dir: "/d/etcd-sockets"}.clientURL(), 2).args()
			for flag, want := range tc.want {
				if diff := cmp.Diff(want, flagValues(args, flag)); diff != "" {
					t.Errorf("--%s (-want +got):\n%s\nin %v", flag, diff, args)
				}
			}
			if got := flagValues(args, "client-ca-file"); !slices.Equal(got, []string{"/d/pki/ca.crt"}) {
				t.Errorf("--client-ca-file = %v", got)
			}
			if got := flagValues(args, "kubelet-client-certificate"); !slices.Equal(got, []string{"/d/pki/apiserver-kubelet-client.crt"}) {
				t.Errorf("--kubelet-client-certificate = %v", got)
			}
		})
	}
}

// etcd listens on Unix sockets in its socket directory, never on a TCP port: it authenticates
// no client.
func TestEtcdFlags(t *testing.T) {
	s := sockets{dir: "/d/etcd-sockets"}
	args := etcdFlags(Options{Dir: "/d"}, s).args()
	want := map[string][]string{
		"listen-client-urls":          {"unix:///d/etcd-sockets/client.sock"},
		"advertise-client-urls":       {"unix://client.sock:0"},
		"listen-peer-urls":            {"unix://peer.sock:0"},
		"initial-advertise-peer-urls": {"unix://peer.sock:0"},
		"initial-cluster":             {"default=unix://peer.sock:0"},
		"listen-metrics-urls":         nil,
		"data-dir":                    {"/d/etcd"},
	}
	for flag, w := range want {
		if diff := cmp.Diff(w, flagValues(args, flag)); diff != "" {
			t.Errorf("--%s (-want +got):\n%s\nin %v", flag, diff, args)
		}
	}
	for _, a := range args {
		if strings.Contains(a, "http://") || strings.Contains(a, "https://") {
			t.Errorf("etcd flag %s names a TCP URL", a)
		}
	}
}

func TestEtcdSocketsDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, etcdSocketDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, etcdSocketDir), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := etcdSockets(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(s.dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("socket directory %s: %v, %v; want mode 0700 even where it existed open", s.dir, fi, err)
	}
	long := filepath.Join(dir, strings.Repeat("d", 100))
	if _, err := etcdSockets(long); err == nil || !strings.Contains(err.Error(), "use a shorter directory") {
		t.Errorf("a socket path over 107 bytes: %v", err)
	}
}

func TestControllerManagerFlags(t *testing.T) {
	cp := &ControlPlane{Kubeconfig: "/d/kubeconfig"}
	p := pki{dir: "/d/pki"}
	cases := map[string]struct {
		opts Options
		want map[string][]string
	}{
		"defaults": {
			opts: Options{},
			want: map[string][]string{"controllers": {"*"}, "node-monitor-grace-period": {"50s"}, "leader-elect": {"false"}, "kubeconfig": {"/d/kubeconfig"}},
		},
		"controllers and grace period": {
			opts: Options{Controllers: []string{"garbagecollector", "daemonset"}, NodeMonitorGracePeriod: 150 * time.Second},
			want: map[string][]string{"controllers": {"garbagecollector,daemonset"}, "node-monitor-grace-period": {"2m30s"}},
		},
		"extra flags": {
			opts: Options{ControllerManagerArgs: map[string][]string{"concurrent-gc-syncs": {"5"}, "kube-api-qps": {"50"}}},
			want: map[string][]string{"concurrent-gc-syncs": {"5"}, "kube-api-qps": {"50"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			args := controllerManagerFlags(tc.opts, cp, p, 3).args()
			for flag, want := range tc.want {
				if diff := cmp.Diff(want, flagValues(args, flag)); diff != "" {
					t.Errorf("--%s (-want +got):\n%s\nin %v", flag, diff, args)
				}
			}
		})
	}
}

func TestStartRequiresDirectories(t *testing.T) {
	if _, err := Start(t.Context(), Options{Dir: t.TempDir()}); err == nil {
		t.Error("Start without BinDir succeeded")
	}
}
