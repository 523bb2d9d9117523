package cluster

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"cdplane/internal/sim/controlplane"
)

func TestLaunchOptions(t *testing.T) {
	cases := map[string]struct {
		opts Options
		want controlplane.Options
	}{
		"etcd and kube-apiserver with the CRDs": {
			opts: Options{},
			want: controlplane.Options{
				Controllers: []string{"garbagecollector", "daemonset"}, InstallCRDs: true,
				APIServerArgs: map[string][]string{"authorization-mode": {"RBAC"}},
			},
		},
		"controllers and scheduler, no CRDs": {
			opts: Options{ControllerManager: true, Controllers: []string{"garbagecollector"}, Scheduler: true, NoCRDs: true},
			want: controlplane.Options{
				ControllerManager: true, Controllers: []string{"garbagecollector"}, Scheduler: true,
				APIServerArgs: map[string][]string{"authorization-mode": {"RBAC"}},
			},
		},
		"apiserver flags added and replaced": {
			opts: Options{APIServerArgs: map[string][]string{"authorization-mode": {"Node,RBAC"}, "kubelet-preferred-address-types": {"InternalIP"}}},
			want: controlplane.Options{
				Controllers: []string{"garbagecollector", "daemonset"}, InstallCRDs: true,
				APIServerArgs: map[string][]string{"authorization-mode": {"Node,RBAC"}, "kubelet-preferred-address-types": {"InternalIP"}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tc.want.Dir, tc.want.BinDir = "/dir", "/bin"
			tc.want.ControllerManagerArgs = map[string][]string{"concurrent-gc-syncs": {"5"}}
			got := launchOptions("/dir", "/bin", tc.opts)
			if got.Detached {
				t.Error("test processes would outlive the test binary")
			}
			if diff := cmp.Diff(tc.want, got, cmp.FilterPath(func(p cmp.Path) bool {
				return p.String() == "Progress" || p.String() == "Started"
			}, cmp.Ignore())); diff != "" {
				t.Errorf("launcher options (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNamespaceName(t *testing.T) {
	cases := map[string]string{
		"TestCreate":                "testcreate-",
		"TestCreate/with_a_subtest": "testcreate-with-a-subtest-",
		"TestAVeryLongNameThatGoesOnAndOnAndOnForever": "testaverylongnamethatgoesonandonandonfor-",
	}
	for in, want := range cases {
		if got := namespaceName(in); got != want {
			t.Errorf("namespaceName(%q) = %q, want %q", in, got, want)
		}
	}
}
