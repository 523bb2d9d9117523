package kubelet

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// EtcResolvConfPath is the container path of the pod's resolv.conf, which the kubelet manages.
const EtcResolvConfPath = "/etc/resolv.conf"

// The simulated cluster's DNS, as the kubelet's --cluster-dns and --cluster-domain give it. No
// DNS server listens at either address and nothing sends it queries: the resolv.conf is what a
// program in the pod that resolves names as glibc does (the simulated IMEX) reads to know how
// many lookups a name costs.
const (
	// ClusterDNSAddr stands for the cluster DNS service's address (kube-dns): a loopback
	// address outside the pod range (DefaultPodCIDR), the nodes' addresses and the IMEX
	// sentinel block (127.127.0.0/16).
	ClusterDNSAddr = "127.0.0.10"
	// ClusterDomain is the cluster's DNS domain.
	ClusterDomain = "cluster.local"
	// NodeNameserver is the nameserver of a simulated node's own resolv.conf, which pods of DNS
	// policy Default get: a local stub resolver's address. The node's has no search list and
	// no options.
	NodeNameserver = "127.0.0.53"
)

// The kubelet's limits on a pod's resolver configuration: extra nameservers and search domains
// are dropped.
const (
	maxDNSNameservers = 3
	maxDNSSearchPaths = 32
)

// clusterFirstOptions are the options the kubelet gives a pod that uses the cluster DNS.
var clusterFirstOptions = []string{"ndots:5"}

// dnsConfig is a pod's resolver configuration, what its resolv.conf says.
type dnsConfig struct {
	nameservers, searches, options []string
}

// podDNSConfig is the resolver configuration the kubelet gives pod, from its dnsPolicy and its
// dnsConfig: ClusterFirst (the default) uses the cluster DNS, the search list
// <namespace>.svc.<domain>, svc.<domain>, <domain>, and ndots:5, except for a hostNetwork pod,
// which falls back to Default, as ClusterFirstWithHostNet does not; Default uses the node's
// resolv.conf; None starts empty. The pod's dnsConfig is then added: nameservers and search
// domains appended (repeats dropped), options merged by name (the pod's value wins; order as
// first given, where the kubelet's is unspecified). At most 3 nameservers and 32 search domains
// are kept.
func podDNSConfig(pod *corev1.Pod) dnsConfig {
	var c dnsConfig
	switch pod.Spec.DNSPolicy {
	case corev1.DNSNone:
	case corev1.DNSDefault:
		c = nodeDNSConfig()
	case corev1.DNSClusterFirst, "":
		if pod.Spec.HostNetwork {
			c = nodeDNSConfig()
			break
		}
		c = clusterDNSConfig(pod.Namespace)
	default: // ClusterFirstWithHostNet; the API server refuses any other policy
		c = clusterDNSConfig(pod.Namespace)
	}
	if d := pod.Spec.DNSConfig; d != nil {
		c.nameservers = omitDuplicates(append(c.nameservers, d.Nameservers...))
		c.searches = omitDuplicates(append(c.searches, d.Searches...))
		c.options = mergeDNSOptions(c.options, d.Options)
	}
	c.nameservers = c.nameservers[:min(len(c.nameservers), maxDNSNameservers)]
	c.searches = c.searches[:min(len(c.searches), maxDNSSearchPaths)]
	return c
}

// nodeDNSConfig is a simulated node's own resolv.conf.
func nodeDNSConfig() dnsConfig {
	return dnsConfig{nameservers: []string{NodeNameserver}}
}

// clusterDNSConfig is the cluster DNS configuration of a pod in namespace.
func clusterDNSConfig(namespace string) dnsConfig {
	return dnsConfig{
		nameservers: []string{ClusterDNSAddr},
		searches:    []string{namespace + ".svc." + ClusterDomain, "svc." + ClusterDomain, ClusterDomain},
		options:     slices.Clone(clusterFirstOptions),
	}
}

// omitDuplicates drops the repeats of earlier entries.
func omitDuplicates(in []string) []string {
	seen := map[string]bool{}
	out := make([]string, 0, len(in))
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// mergeDNSOptions merges the pod's options into options ("name" or "name:value") by name: a
// pod option replaces one of the same name in place, others are appended.
func mergeDNSOptions(options []string, pod []corev1.PodDNSConfigOption) []string {
	out := slices.Clone(options)
	for _, o := range pod {
		opt := o.Name
		if o.Value != nil && *o.Value != "" {
			opt += ":" + *o.Value
		}
		i := slices.IndexFunc(out, func(s string) bool { name, _, _ := strings.Cut(s, ":"); return name == o.Name })
		if i >= 0 {
			out[i] = opt
		} else {
			out = append(out, opt)
		}
	}
	return out
}

// render writes the configuration as the container runtime writes a pod's resolv.conf.
func (c dnsConfig) render() string {
	var b strings.Builder
	if len(c.searches) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(c.searches, " "))
	}
	for _, ns := range c.nameservers {
		fmt.Fprintf(&b, "nameserver %s\n", ns)
	}
	if len(c.options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(c.options, " "))
	}
	return b.String()
}

// resolvConfPath is where the pod's resolv.conf lies on the host.
func (w *podWorker) resolvConfPath() string { return filepath.Join(w.dir, "resolv.conf") }

// writeResolvConf writes the pod's resolv.conf once, as the kubelet has it written when it
// creates the sandbox.
func (w *podWorker) writeResolvConf(pod *corev1.Pod) error {
	path := w.resolvConfPath()
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	return os.WriteFile(path, []byte(podDNSConfig(pod).render()), 0o644)
}
