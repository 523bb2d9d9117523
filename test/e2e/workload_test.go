package e2e

// The IMEX workload: a job whose pods finish only when IMEX works. Each pod runs this test
// binary (installed in the sim's image as workloadProgram, see TestMain) in workload mode: it
// waits for the test to release it, then until its node's simulated IMEX — queried on the
// config path the kubelet plugin gave the domain on that node — lists as peers, holds
// connections to, and accepts connections from exactly the peers the release names for its
// node; it then records that it is done and exits 0 once every node of the release is done (a
// barrier, as a multi-node job has). Whatever the controller or the daemons believe, the job
// completes only if IMEX is connected.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/imex"
	"cdplane/internal/sim/imexsim"
)

const (
	// workloadProgram is the name the sim's image runs this binary under.
	workloadProgram = "e2e-imex-workload"
	// workloadEnv switches the test binary into workload mode; its value is the IMEX config
	// paths by node, as JSON.
	workloadEnv = "E2E_IMEX_CONFIGS"
	// workloadReleaseEnv names the release file.
	workloadReleaseEnv = "E2E_RELEASE_FILE"
	// workloadNodeEnv is the node the pod runs on (downward API).
	workloadNodeEnv = "E2E_NODE_NAME"
	// workloadDoneLine starts the line a workload logs when its IMEX is connected.
	workloadDoneLine = "IMEX CONNECTED"
)

// release is what the test tells the workload: each node's expected IMEX peers (addresses).
type release struct {
	Peers map[string][]string `json:"peers"`
}

// workloadMain is the workload's program. It ends with 0 when done, and with 0 on SIGTERM too
// (a worker told to stop stops cleanly, as the no-op container does), saying so.
func workloadMain(out io.Writer) int {
	node := os.Getenv(workloadNodeEnv)
	releaseFile := os.Getenv(workloadReleaseEnv)
	var configs map[string]string
	if err := json.Unmarshal([]byte(os.Getenv(workloadEnv)), &configs); err != nil || node == "" || releaseFile == "" {
		fmt.Fprintf(out, "workload: bad environment (%s, %s, %s): %v\n", workloadEnv, workloadReleaseEnv, workloadNodeEnv, err)
		return 2
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	return runWorkload(node, configs[node], releaseFile, out, sigs)
}

// runWorkload is the workload on node, whose IMEX serves config, until it is done or stopped.
func runWorkload(node, config, releaseFile string, out io.Writer, sigs <-chan os.Signal) int {
	fmt.Fprintf(out, "workload on %s: IMEX config %s, release %s\n", node, config, releaseFile)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last string
	say := func(s string) {
		if s != last {
			fmt.Fprintf(out, "%s %s\n", time.Now().Format(time.RFC3339Nano), s)
			last = s
		}
	}
	var rel *release
	connected := false
	for {
		select {
		case sig := <-sigs:
			say(fmt.Sprintf("stopped by %v before finishing", sig))
			return 0
		case <-tick.C:
		}
		if rel == nil {
			data, err := os.ReadFile(releaseFile)
			if err != nil {
				say("waiting for the release")
				continue
			}
			rel = &release{}
			if err := json.Unmarshal(data, rel); err != nil {
				fmt.Fprintf(out, "workload: release %s: %v\n", releaseFile, err)
				return 2
			}
			want, ok := rel.Peers[node]
			if !ok {
				fmt.Fprintf(out, "workload: the release does not name node %s\n", node)
				return 2
			}
			say(fmt.Sprintf("released; want IMEX peers %v", want))
		}
		if !connected {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st, err := imexsim.Query(ctx, config)
			cancel()
			if err != nil {
				say(fmt.Sprintf("IMEX not answering: %v", err))
				continue
			}
			if why := imexMismatch(st, rel.Peers[node]); why != "" {
				say("IMEX not connected: " + why)
				continue
			}
			connected = true
			say(fmt.Sprintf("%s to %v both ways", workloadDoneLine, rel.Peers[node]))
			if err := os.WriteFile(releaseFile+"."+node+".done", nil, 0o644); err != nil {
				fmt.Fprintf(out, "workload: %v\n", err)
				return 2
			}
		}
		waiting := 0
		for n := range rel.Peers {
			if _, err := os.Stat(releaseFile + "." + n + ".done"); err != nil {
				waiting++
			}
		}
		if waiting == 0 {
			say("every node of the job is connected: done")
			return 0
		}
		say(fmt.Sprintf("waiting for %d other nodes of the job", waiting))
	}
}

// imexMismatch says how a simulated IMEX's status differs from being connected, both ways, to
// exactly the peers want (addresses); "" when it does not. Unresolved entries are not peers:
// in DNS-names mode nodes.cfg lists every index's name and the hosts file maps only those in
// use.
func imexMismatch(st imexsim.Status, want []string) string {
	w := sortedHosts(want)
	var why []string
	for _, l := range []struct {
		name string
		got  []string
	}{{"peers", members(st.Peers)}, {"connected", st.Connected}, {"inbound", st.Inbound}} {
		if got := sortedHosts(l.got); !slices.Equal(got, w) {
			why = append(why, fmt.Sprintf("%s %v", l.name, got))
		}
	}
	if len(why) == 0 {
		return ""
	}
	return fmt.Sprintf("%s; want %v", strings.Join(why, ", "), w)
}

// members leaves out of a node list's addresses the sentinels, which stand for the empty slots
// (imex.SentinelPrefix): IMEX resolves them but no peer is ever there.
func members(peers []string) []string {
	return slices.DeleteFunc(slices.Clone(peers), func(a string) bool {
		addr, err := netip.ParseAddr(a)
		return err == nil && imex.SentinelPrefix.Contains(addr)
	})
}

// sortedHosts returns the addresses without ports, sorted.
func sortedHosts(addrs []string) []string {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		if h, _, err := net.SplitHostPort(a); err == nil {
			a = h
		}
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// imexJob is an Indexed Job of pods IMEX workload pods, one per node (anti-affinity), claiming
// the domain's channel, pinned to racks when given. Its pods finish once released
// (releaseIMEXJob) and connected.
func imexJob(t *testing.T, ns, name string, cd *cdv1beta1.ComputeDomain, pods int, racks ...string) *batchv1.Job {
	t.Helper()
	j := imexJobObject(t, ns, name, cd, pods, racks...)
	must(t, c.Create(ctx(), j))
	return j
}

// imexJobObject is imexJob's Job, not created yet, for a test that changes it first.
func imexJobObject(t *testing.T, ns, name string, cd *cdv1beta1.ComputeDomain, pods int, racks ...string) *batchv1.Job {
	t.Helper()
	configs := map[string]string{}
	for _, n := range simState.Nodes {
		configs[n.Name] = imexConfigPath(t, n.Name, string(cd.UID))
	}
	data, err := json.Marshal(configs)
	must(t, err)
	j := jobObject(ns, name, cd.Spec.Channel.ResourceClaimTemplate.Name, pods, 0, racks...)
	ctr := &j.Spec.Template.Spec.Containers[0]
	ctr.Image, ctr.Command, ctr.Args = "cdplane:sim", []string{workloadProgram}, nil
	ctr.Env = []corev1.EnvVar{
		{Name: workloadEnv, Value: string(data)},
		{Name: workloadReleaseEnv, Value: releaseFile(ns, name)},
		{Name: workloadNodeEnv, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
	}
	must(t, os.MkdirAll(filepath.Dir(releaseFile(ns, name)), 0o755))
	return j
}

func releaseFile(ns, job string) string {
	return filepath.Join(stateDir, "e2e-workloads", ns, job+".release")
}

// releaseIMEXJob lets the job's running pods finish: each once its node's IMEX is connected to
// the peers the test derives itself, not from the controller: the domain's other daemon pods
// in the node's rack (the sim's NVLink clique), at their pod IPs.
func releaseIMEXJob(t *testing.T, id, ns, name string, cd *cdv1beta1.ComputeDomain) {
	t.Helper()
	pods := map[string]corev1.Pod{}
	for _, p := range daemonPods(t, id, cd) {
		if p.DeletionTimestamp == nil {
			pods[p.Spec.NodeName] = p
		}
	}
	rel := release{Peers: map[string][]string{}}
	for _, w := range jobPods(t, ns, name) {
		if w.DeletionTimestamp != nil || w.Status.Phase != corev1.PodRunning {
			continue
		}
		node := w.Spec.NodeName
		if _, ok := pods[node]; !ok {
			t.Fatalf("worker %s runs on %s, where the domain has no daemon", w.Name, node)
		}
		peers := []string{}
		for other, p := range pods {
			if other != node && rackOf(t, other) == rackOf(t, node) {
				peers = append(peers, p.Status.PodIP)
			}
		}
		sort.Strings(peers)
		rel.Peers[node] = peers
	}
	data, err := json.Marshal(rel)
	must(t, err)
	path := releaseFile(ns, name)
	must(t, os.WriteFile(path+".tmp", data, 0o644))
	must(t, os.Rename(path+".tmp", path))
	t.Logf("released job %s: expected IMEX peers by node %v", name, rel.Peers)
}

// checkIMEXJobLogs asserts that every pod of the job that finished after the release logged
// that its IMEX was connected.
func checkIMEXJobLogs(t *testing.T, ns, name string) {
	t.Helper()
	n := 0
	for _, p := range jobPods(t, ns, name) {
		log := logs(t, &p)
		if strings.Contains(log, "before finishing") {
			continue
		}
		if !strings.Contains(log, workloadDoneLine) {
			t.Errorf("worker %s on %s finished without its IMEX connected:\n%s", p.Name, p.Spec.NodeName, log)
		}
		n++
	}
	if n == 0 {
		t.Errorf("no worker of job %s finished after the release", name)
	}
}

func rackOf(t *testing.T, node string) int {
	t.Helper()
	for _, n := range simState.Nodes {
		if n.Name == node {
			return n.Rack
		}
	}
	t.Fatalf("no simulated node %s", node)
	return -1
}
