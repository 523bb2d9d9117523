package kubelet

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodResolvConf(t *testing.T) {
	two := "2"
	cases := map[string]struct {
		policy      corev1.DNSPolicy
		hostNetwork bool
		config      *corev1.PodDNSConfig
		want        string
	}{
		"default policy is ClusterFirst": {
			want: "search ns1.svc.cluster.local svc.cluster.local cluster.local\nnameserver 127.0.0.10\noptions ndots:5\n",
		},
		"ClusterFirst": {
			policy: corev1.DNSClusterFirst,
			want:   "search ns1.svc.cluster.local svc.cluster.local cluster.local\nnameserver 127.0.0.10\noptions ndots:5\n",
		},
		"ClusterFirst with host network falls back to Default": {
			policy: corev1.DNSClusterFirst, hostNetwork: true,
			want: "nameserver 127.0.0.53\n",
		},
		"ClusterFirstWithHostNet": {
			policy: corev1.DNSClusterFirstWithHostNet, hostNetwork: true,
			want: "search ns1.svc.cluster.local svc.cluster.local cluster.local\nnameserver 127.0.0.10\noptions ndots:5\n",
		},
		"Default": {policy: corev1.DNSDefault, want: "nameserver 127.0.0.53\n"},
		"ClusterFirst with a dnsConfig: appended, options merged by name": {
			policy: corev1.DNSClusterFirst,
			config: &corev1.PodDNSConfig{
				Nameservers: []string{"127.0.0.10", "192.0.2.1"},
				Searches:    []string{"example.com", "cluster.local"},
				Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: &two}, {Name: "edns0"}},
			},
			want: "search ns1.svc.cluster.local svc.cluster.local cluster.local example.com\n" +
				"nameserver 127.0.0.10\nnameserver 192.0.2.1\noptions ndots:2 edns0\n",
		},
		"None: the dnsConfig only": {
			policy: corev1.DNSNone,
			config: &corev1.PodDNSConfig{
				Nameservers: []string{"192.0.2.1"},
				Searches:    []string{"example.com"},
				Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: &two}},
			},
			want: "search example.com\nnameserver 192.0.2.1\noptions ndots:2\n",
		},
		"at most three nameservers": {
			policy: corev1.DNSDefault,
			config: &corev1.PodDNSConfig{Nameservers: []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"}},
			want:   "nameserver 127.0.0.53\nnameserver 192.0.2.1\nnameserver 192.0.2.2\n",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns1"},
				Spec:       corev1.PodSpec{DNSPolicy: tc.policy, HostNetwork: tc.hostNetwork, DNSConfig: tc.config},
			}
			if diff := cmp.Diff(tc.want, podDNSConfig(pod).render()); diff != "" {
				t.Errorf("resolv.conf (-want +got):\n%s", diff)
			}
		})
	}
}
