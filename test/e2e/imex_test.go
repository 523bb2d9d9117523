package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubectl/pkg/util/podutils"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/daemonenv"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/metrics"
	"cdplane/internal/plane"
	"cdplane/internal/sim/imexsim"
	"cdplane/internal/testutil"
)

// Where the kubelet plugin keeps things on a simulated node: read from its pod (a flag's
// container path, through its hostPath volume, under the node's directory), as a user would
// find it on a real node, and remembered (the chart's values do not change while the suite
// runs; a plugin pod may be away when asked).
var (
	pluginPathsMu sync.Mutex
	pluginPaths   = map[string]string{}
)

// pluginHostPath returns the host path on node of the kubelet plugin's flag (e.g. --cdi-root).
func pluginHostPath(t *testing.T, node, flag string) string {
	t.Helper()
	key := node + " " + flag
	pluginPathsMu.Lock()
	defer pluginPathsMu.Unlock()
	if p, ok := pluginPaths[key]; ok {
		return p
	}
	var pod *corev1.Pod
	testutil.Eventually(t, 2*time.Minute, "a kubelet plugin pod on "+node, func() (bool, error) {
		pod = pluginPod(t, plane.Name(planeOf(t, node), plane.DriverNamespaceLegacyName), node)
		return pod != nil, nil
	})
	p, err := podHostPath(pod, flag)
	if err != nil {
		t.Fatalf("kubelet plugin pod %s on %s: %v", pod.Name, node, err)
	}
	pluginPaths[key] = filepath.Join(stateDir, "nodes", node, p)
	return pluginPaths[key]
}

// podHostPath resolves the value of a container flag (--name=/container/path) of the pod's
// first container to the host path its hostPath volume gives.
func podHostPath(pod *corev1.Pod, flag string) (string, error) {
	ctr := pod.Spec.Containers[0]
	value := ""
	for _, a := range append(append([]string{}, ctr.Command...), ctr.Args...) {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			value = v
		}
	}
	if value == "" {
		return "", fmt.Errorf("no %s in the args %v", flag, ctr.Args)
	}
	var mount *corev1.VolumeMount
	for i, m := range ctr.VolumeMounts {
		if (value == m.MountPath || strings.HasPrefix(value, strings.TrimSuffix(m.MountPath, "/")+"/")) &&
			(mount == nil || len(m.MountPath) > len(mount.MountPath)) {
			mount = &ctr.VolumeMounts[i]
		}
	}
	if mount == nil {
		return "", fmt.Errorf("%s=%s is on no volume mount", flag, value)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == mount.Name && v.HostPath != nil {
			rel, err := filepath.Rel(mount.MountPath, value)
			if err != nil {
				return "", err
			}
			return filepath.Join(v.HostPath.Path, rel), nil
		}
	}
	return "", fmt.Errorf("volume %s of %s=%s is not a hostPath", mount.Name, flag, value)
}

// imexConfigPath is the IMEX config of the domain on node: in the plugin's per-domain config
// directory (<--state-dir>/domains/<domain UID>), which the daemon's claim mounts and the
// daemon writes imexd.cfg into.
func imexConfigPath(t *testing.T, node, uid string) string {
	t.Helper()
	return filepath.Join(pluginHostPath(t, node, "--state-dir"), "domains", uid, "imexd.cfg")
}

// cdiSpecPath is where the plugin on node writes the claim's CDI spec.
func cdiSpecPath(t *testing.T, node string, claim types.UID) string {
	t.Helper()
	return filepath.Join(pluginHostPath(t, node, "--cdi-root"), kubeletplugin.CDISpecName(claim))
}

func planeOf(t *testing.T, node string) string {
	t.Helper()
	for _, n := range simState.Nodes {
		if n.Name == node {
			return n.Plane
		}
	}
	t.Fatalf("no simulated node %s", node)
	return ""
}

// member is one node of a domain as the controller lists it.
type member struct {
	Node, IP, CliqueID, Status string
	Index                      int
}

// domainMembers returns the domain's members as the controller wrote them: its cliques' entries
// (with the entries of status.nodes, which must agree), or status.nodes alone for a domain kept
// without cliques; and the cliques' resourceVersions by name.
func domainMembers(id string, cd *cdv1beta1.ComputeDomain) (map[string]member, map[string]string, error) {
	cur := &cdv1beta1.ComputeDomain{}
	if err := c.Get(ctx(), client.ObjectKeyFromObject(cd), cur); err != nil {
		return nil, nil, err
	}
	status := map[string]member{}
	for _, n := range cur.Status.Nodes {
		status[n.Name] = member{Node: n.Name, IP: n.IPAddress, CliqueID: n.CliqueID, Status: n.Status, Index: n.Index}
	}
	list := &cdv1beta1.ComputeDomainCliqueList{}
	if err := c.List(ctx(), list, client.InNamespace(plane.Name(id, plane.DriverNamespaceLegacyName)),
		client.MatchingLabels{cdv1beta1.ComputeDomainLabel: string(cd.UID)}); err != nil {
		return nil, nil, err
	}
	rvs := map[string]string{}
	if len(list.Items) == 0 {
		return status, rvs, nil
	}
	fromCliques := map[string]member{}
	for _, cl := range list.Items {
		rvs[cl.Name] = cl.ResourceVersion
		for _, d := range cl.Daemons {
			fromCliques[d.NodeName] = member{Node: d.NodeName, IP: d.IPAddress, CliqueID: d.CliqueID, Status: d.Status, Index: d.Index}
		}
	}
	for node, m := range status {
		if m.CliqueID == "" {
			fromCliques[node] = m // fabric-less nodes are in status.nodes only
		}
	}
	if fmt.Sprint(sortedMembers(fromCliques)) != fmt.Sprint(sortedMembers(status)) {
		return nil, nil, fmt.Errorf("the cliques list %v but status.nodes lists %v", sortedMembers(fromCliques), sortedMembers(status))
	}
	return fromCliques, rvs, nil
}

func sortedMembers(m map[string]member) []member {
	out := make([]member, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// liveDaemons returns the domain's daemon pods by node, failing the poll when a node has more
// than one or one is terminating.
func liveDaemons(t *testing.T, id string, cd *cdv1beta1.ComputeDomain) (map[string]corev1.Pod, error) {
	t.Helper()
	out := map[string]corev1.Pod{}
	for _, p := range daemonPods(t, id, cd) {
		if p.DeletionTimestamp != nil {
			return nil, fmt.Errorf("daemon pod %s on %s is terminating", p.Name, p.Spec.NodeName)
		}
		if _, dup := out[p.Spec.NodeName]; dup {
			return nil, fmt.Errorf("two daemon pods on %s", p.Spec.NodeName)
		}
		out[p.Spec.NodeName] = p
	}
	return out, nil
}

// waitMembership waits until the domain's daemon pods run, Ready, on exactly nodes, and the
// controller lists exactly those nodes, each Ready at the IP of its current daemon pod — which
// only a status written after those pods existed can say — and returns the members and the
// cliques' resourceVersions.
func waitMembership(t *testing.T, id string, cd *cdv1beta1.ComputeDomain, nodes []string, timeout time.Duration) (map[string]member, map[string]string) {
	t.Helper()
	want := slices.Clone(nodes)
	sort.Strings(want)
	var members map[string]member
	var rvs map[string]string
	testutil.Eventually(t, timeout, fmt.Sprintf("domain %s: daemons Ready on %v and the controller listing them at their pods' IPs", cd.Name, want), func() (bool, error) {
		pods, err := liveDaemons(t, id, cd)
		if err != nil {
			return false, err
		}
		var have []string
		for node, p := range pods {
			if !podutils.IsPodReady(&p) || p.Status.PodIP == "" {
				return false, fmt.Errorf("daemon pod %s on %s not Ready", p.Name, node)
			}
			have = append(have, node)
		}
		sort.Strings(have)
		if !slices.Equal(have, want) {
			return false, fmt.Errorf("daemon pods on %v", have)
		}
		if members, rvs, err = domainMembers(id, cd); err != nil {
			return false, err
		}
		if len(members) != len(want) {
			return false, fmt.Errorf("the controller lists %v", sortedMembers(members))
		}
		for node, p := range pods {
			m, ok := members[node]
			if !ok || m.IP != p.Status.PodIP || m.Status != cdv1beta1.StatusReady {
				return false, fmt.Errorf("the controller lists %v; daemon pod on %s has IP %s", sortedMembers(members), node, p.Status.PodIP)
			}
		}
		return true, nil
	})
	return members, rvs
}

// checkIndexesKept asserts that each of nodes has the same index after as before.
func checkIndexesKept(t *testing.T, before, after map[string]member, nodes []string) {
	t.Helper()
	for _, n := range nodes {
		b, a := before[n], after[n]
		if b.Index != a.Index || b.CliqueID != a.CliqueID {
			t.Errorf("node %s had index %d in clique %q and now has index %d in clique %q; a node keeps its index while it serves the domain",
				n, b.Index, b.CliqueID, a.Index, a.CliqueID)
		}
	}
}

// checkIMEXConnected waits until every node of the domain runs an IMEX — queried on the config
// path the kubelet plugin gives the domain on that node — that lists as peers, holds outgoing
// connections to, and accepts connections from exactly the other members of its clique, at
// their current daemon pods' IPs. The clique members are what the controller lists, which must
// agree with what the test knows: the domain's daemon pods of one rack (the sim's NVLink
// clique) share a clique, at their pods' IPs.
func checkIMEXConnected(t *testing.T, id string, cd *cdv1beta1.ComputeDomain) {
	t.Helper()
	testutil.Eventually(t, 2*time.Minute, "every IMEX of domain "+cd.Name+" connected both ways to exactly its clique's other members", func() (bool, error) {
		pods, err := liveDaemons(t, id, cd)
		if err != nil {
			return false, err
		}
		if len(pods) == 0 {
			return false, fmt.Errorf("no daemon pods")
		}
		members, _, err := domainMembers(id, cd)
		if err != nil {
			return false, err
		}
		clique := map[string]string{} // node's clique id by rack, checked consistent
		rackClique := map[int]string{}
		for node, p := range pods {
			m, ok := members[node]
			if !ok || m.IP != p.Status.PodIP {
				return false, fmt.Errorf("the controller lists %v; daemon pod on %s has IP %s", sortedMembers(members), node, p.Status.PodIP)
			}
			r := rackOf(t, node)
			if id, seen := rackClique[r]; seen && id != m.CliqueID {
				return false, fmt.Errorf("nodes of rack %d are in cliques %q and %q", r, id, m.CliqueID)
			}
			rackClique[r], clique[node] = m.CliqueID, m.CliqueID
		}
		if len(members) != len(pods) {
			return false, fmt.Errorf("the controller lists %v; daemon pods run on %d nodes", sortedMembers(members), len(pods))
		}
		for node := range pods {
			var want []string
			for other, m := range members {
				if other != node && m.CliqueID == clique[node] {
					want = append(want, m.IP)
				}
			}
			st, err := imexsim.Query(ctx(), imexConfigPath(t, node, string(cd.UID)))
			if err != nil {
				return false, fmt.Errorf("IMEX on %s: %w", node, err)
			}
			if h := sortedHosts([]string{st.Address}); len(h) != 1 || h[0] != pods[node].Status.PodIP {
				return false, fmt.Errorf("IMEX on %s listens on %s, not its pod IP %s", node, st.Address, pods[node].Status.PodIP)
			}
			if why := imexMismatch(st, want); why != "" {
				return false, fmt.Errorf("IMEX on %s: %s", node, why)
			}
			// Every name of the node list resolves from the pod's hosts file: none ever
			// reached (simulated) cluster DNS through the pod's resolv.conf.
			if st.DNSLookups != 0 {
				return false, fmt.Errorf("IMEX on %s made %d DNS lookups (unresolved: %v)", node, st.DNSLookups, st.Unresolved)
			}
		}
		return true, nil
	})
}

// checkDaemonMetrics scrapes each of the domain's daemon pods as Prometheus would, at its pod IP
// and container port "metrics": each serves its own series, labelled with the plane, the domain
// and its node, registered and Ready at its index in the membership, IMEX started.
func checkDaemonMetrics(t *testing.T, id string, cd *cdv1beta1.ComputeDomain) {
	t.Helper()
	testutil.Eventually(t, time.Minute, "every daemon of domain "+cd.Name+" serving its metrics, registered and Ready at its index", func() (bool, error) {
		pods, err := liveDaemons(t, id, cd)
		if err != nil {
			return false, fmt.Errorf("daemon pods: %w", err)
		}
		if len(pods) == 0 {
			return false, errors.New("no daemon pods")
		}
		members, _, err := domainMembers(id, cd)
		if err != nil {
			return false, err
		}
		for node, p := range pods {
			port := int32(0)
			for _, cp := range p.Spec.Containers[0].Ports {
				if cp.Name == daemonenv.MetricsPortName {
					port = cp.ContainerPort
				}
			}
			if port == 0 || p.Status.PodIP == "" {
				return false, fmt.Errorf("daemon pod %s: no port %q or no IP (%v, %q)", p.Name, daemonenv.MetricsPortName, p.Spec.Containers[0].Ports, p.Status.PodIP)
			}
			got, err := scrapeDaemon(net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port))), id, string(cd.UID), node)
			if err != nil {
				return false, fmt.Errorf("daemon on %s: %w", node, err)
			}
			want := map[string]float64{
				metrics.DaemonRegisteredName: 1, metrics.DaemonReadyName: 1, metrics.DaemonCliqueIndexName: float64(members[node].Index),
				metrics.DaemonInfoName: 1,
			}
			for name, v := range want {
				if got[name] != v {
					return false, fmt.Errorf("daemon on %s: %s = %v, want %v", node, name, got[name], v)
				}
			}
			if got[metrics.DaemonIMEXStartsName] < 1 {
				return false, fmt.Errorf("daemon on %s: %s = %v, want IMEX started", node, metrics.DaemonIMEXStartsName, got[metrics.DaemonIMEXStartsName])
			}
		}
		return true, nil
	})
}

// scrapeDaemon reads a daemon's /metrics at addr: each metric's value summed over its series,
// each series checked to carry the plane, the domain and the node.
func scrapeDaemon(addr, id, domainUID, node string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx(), http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	want := map[string]string{metrics.LabelControlPlaneID: id, metrics.LabelComputeDomainUID: domainUID, metrics.LabelNode: node}
	out := map[string]float64{}
	for name, f := range families {
		if !strings.HasPrefix(name, "cdplane_") {
			continue // the process's own (go_*, process_*)
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					return nil, fmt.Errorf("%s: %s=%q, want %q", name, k, labels[k], v)
				}
			}
			out[name] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return out, nil
}
