package kubelet

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"cdplane/internal/sim/imexsim"
)

// Every container learns where its /etc/hosts and /etc/resolv.conf lie on the host and its
// pod's address, the simulated IMEX's stand-ins; a pod that mounts its own files there gets
// those.
func TestStandInEnv(t *testing.T) {
	cases := map[string]struct {
		mappings []PathMapping
		podIP    string
		want     []EnvVar
	}{
		"kubelet-managed files": {
			mappings: []PathMapping{
				{ContainerPath: EtcHostsPath, HostPath: "/pods/p/etc-hosts"},
				{ContainerPath: EtcResolvConfPath, HostPath: "/pods/p/resolv.conf"},
			},
			podIP: "127.128.0.7",
			want: []EnvVar{
				{Name: imexsim.HostsFileEnv, Value: "/pods/p/etc-hosts"},
				{Name: imexsim.ResolvConfEnv, Value: "/pods/p/resolv.conf"},
				{Name: imexsim.LocalAddrsEnv, Value: "127.128.0.7"},
			},
		},
		"the pod's own /etc": {
			mappings: []PathMapping{{ContainerPath: "/etc", HostPath: "/vol/etc"}},
			podIP:    "127.10.0.1",
			want: []EnvVar{
				{Name: imexsim.HostsFileEnv, Value: "/vol/etc/hosts"},
				{Name: imexsim.ResolvConfEnv, Value: "/vol/etc/resolv.conf"},
				{Name: imexsim.LocalAddrsEnv, Value: "127.10.0.1"},
			},
		},
		"nothing mapped, no address": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, standInEnv(NewPathMap(tc.mappings), tc.podIP)); diff != "" {
				t.Errorf("stand-ins (-want +got):\n%s", diff)
			}
		})
	}
}
