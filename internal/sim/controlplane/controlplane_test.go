package controlplane

import (
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
			want: map[string][]string{"authorization-mode": {"Node,RBAC"}, "disable-admission-plugins": nil, "etcd-servers": {"http://127.0.0.1:1"}},
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
			args := apiServerFlags(tc.opts, p, "http://127.0.0.1:1", 2).args()
			for flag, want := range tc.want {
				if diff := cmp.Diff(want, flagValues(args, flag)); diff != "" {
					t.Errorf("--%s (-want +got):\n%s\nin %v", flag, diff, args)
				}
			}
			if got := flagValues(args, "client-ca-file"); !slices.Equal(got, []string{"/d/pki/ca.crt"}) {
				t.Errorf("--client-ca-file = %v", got)
			}
		})
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
