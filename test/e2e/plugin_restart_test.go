package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubectl/pkg/util/podutils"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
)

// Restarting the kubelet plugin (its pod deleted; the DaemonSet brings it back) on a node where
// a workload of a live domain runs: the domain stays Ready all along; the running workload keeps
// its channel (same pod, not restarted, its claim's CDI spec unchanged where the plugin wrote
// it, its checkpoint entry unchanged) and the daemon carries on with IMEX connected; nothing is
// prepared twice: the new plugin injects nothing for the running claim, and the node's CDI
// directory and checkpoint hold exactly the live claims. Once the plugin is back it unprepares
// the claim its predecessor prepared (the workload deleted: its spec goes) and prepares a new
// one (a new workload on the node: the node joins the domain again, the other keeps its
// index). A node serves one claim of a domain at a time: a second workload of the domain on
// the node is not schedulable, so the new prepare comes after the old claim's unprepare.
func TestKubeletPluginRestartWithRunningWorkloads(t *testing.T) {
	e2eOnly(t)
	waitPlanesIdle(t, planeA)
	driverNS := plane.Name(planeA, plane.DriverNamespaceLegacyName)
	racks := planeRacks(t, planeA)
	nodes := planeNodes(planeA, rackNumber(t, racks[0]))[:2]
	node := nodes[0]
	ns := namespace(t, planeA)
	cd := computeDomain(t, ns, "cd", 2, "")
	w0 := workerPod(t, ns, "w0", "cd", node)
	w1 := workerPod(t, ns, "w1", "cd", nodes[1])
	w0 = waitPodRunning(t, w0, 2*time.Minute)
	w1 = waitPodRunning(t, w1, 2*time.Minute)
	before, _ := waitMembership(t, planeA, cd, nodes, 2*time.Minute)
	waitStatus(t, cd, cdv1beta1.StatusReady, time.Minute)
	checkIMEXConnected(t, planeA, cd)
	daemons, err := liveDaemons(t, planeA, cd)
	must(t, err)
	claim0 := podClaimUID(t, w0)
	spec0 := cdiSpecPath(t, node, claim0)
	specData, err := os.ReadFile(spec0)
	if err != nil {
		t.Fatalf("the running workload's claim has no CDI spec where the plugin writes it: %v", err)
	}
	entry0, ok, err := checkpointEntry(t, node, claim0)
	if err != nil || !ok || entry0.State != kubeletplugin.PrepareCompleted {
		t.Fatalf("the running workload's claim is %+v in the checkpoint (present %v, err %v), want PrepareCompleted", entry0, ok, err)
	}

	old := pluginPod(t, driverNS, node)
	if old == nil {
		t.Fatalf("no kubelet plugin pod on %s", node)
	}
	must(t, c.Delete(ctx(), old))
	// The domain stays Ready while the plugin is away and after it is back.
	var notReady []string
	ready := func() {
		if cur := getCD(t, cd); cur.Status.Status != cdv1beta1.StatusReady {
			notReady = append(notReady, fmt.Sprintf("%s: %s %+v", time.Now().Format(time.TimeOnly), cur.Status.Status, cur.Status.Conditions))
		}
	}
	var plugin *corev1.Pod
	testutil.Eventually(t, 3*time.Minute, "the kubelet plugin back on "+node, func() (bool, error) {
		ready()
		plugin = pluginPod(t, driverNS, node)
		return plugin != nil && plugin.UID != old.UID && podutils.IsPodReady(plugin), nil
	})
	// Sample the domain for a few seconds more (not a wait for a state).
	sample := time.NewTicker(500 * time.Millisecond)
	for range 10 {
		<-sample.C
		ready()
	}
	sample.Stop()
	if len(notReady) > 0 {
		t.Errorf("the domain was not Ready while the plugin restarted: %v", notReady)
	}

	// The running workloads keep their channels.
	for _, w := range []*corev1.Pod{w0, w1} {
		cur := &corev1.Pod{}
		must(t, c.Get(ctx(), client.ObjectKeyFromObject(w), cur))
		if cur.UID != w.UID || cur.Status.Phase != corev1.PodRunning || !podutils.IsPodReady(cur) || restarts(cur) != 0 {
			t.Errorf("workload %s: UID %s (was %s), %s, ready %v, %d restarts; want the same pod running", w.Name, cur.UID, w.UID, cur.Status.Phase, podutils.IsPodReady(cur), restarts(cur))
		}
	}
	if got, err := os.ReadFile(spec0); err != nil || string(got) != string(specData) {
		t.Errorf("the running workload's CDI spec %s after the plugin restart: %v, changed %v", spec0, err, string(got) != string(specData))
	}
	if e, ok, err := checkpointEntry(t, node, claim0); err != nil || !ok || !reflect.DeepEqual(e, entry0) {
		t.Errorf("the running workload's checkpoint entry after the plugin restart is %+v (present %v, err %v), want %+v", e, ok, err, entry0)
	}
	if !nodeHasDomainLabel(t, node, cd) {
		t.Errorf("node %s lost its domain label", node)
	}
	checkDaemonsKept(t, planeA, cd, daemons)
	after, _ := waitMembership(t, planeA, cd, nodes, time.Minute)
	checkIndexesKept(t, before, after, nodes)
	checkIMEXConnected(t, planeA, cd)

	// Nothing prepared twice: the new plugin injected nothing for the running claim, and the
	// node's CDI specs and checkpoint hold exactly the live claims.
	log := logs(t, plugin)
	if injected(log, claim0) {
		t.Errorf("the restarted plugin injected channels again for the running workload's claim %s:\n%s", claim0, log)
	}
	daemonClaim := podClaimUID(t, ptrTo(daemons[node]))
	checkNodeClaims(t, node, []types.UID{claim0, daemonClaim})

	// The new plugin unprepares the claim the old one prepared...
	deleteAndWait(t, w0)
	waitCDISpecGone(t, spec0)
	checkNodeClaims(t, node, nil)
	// ...and prepares a new one: the node joins the domain again.
	w2 := waitPodRunning(t, workerPod(t, ns, "w2", "cd", node), 2*time.Minute)
	claim2 := podClaimUID(t, w2)
	if _, err := os.Stat(cdiSpecPath(t, node, claim2)); err != nil {
		t.Errorf("the new workload's claim has no CDI spec: %v", err)
	}
	if log := logs(t, plugin); !injected(log, claim2) {
		t.Errorf("the restarted plugin did not inject channels for the new claim %s:\n%s", claim2, log)
	}
	checkNodeClaims(t, node, []types.UID{claim2})
	rejoined, _ := waitMembership(t, planeA, cd, nodes, 2*time.Minute)
	checkIndexesKept(t, before, rejoined, nodes[1:])
	waitStatus(t, cd, cdv1beta1.StatusReady, time.Minute)
	checkIMEXConnected(t, planeA, cd)
}

// injected reports whether the plugin's log says it injected channels for the claim.
func injected(log string, claim types.UID) bool {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "Injecting IMEX channels") && strings.Contains(l, string(claim)) {
			return true
		}
	}
	return false
}

// checkNodeClaims waits until the plugin's checkpoint on node holds every claim of want
// PrepareCompleted and no other claim but daemon claims (a daemon's claim comes and goes with
// its pod), aborted entries aside, and its CDI directory holds a spec for exactly those claims.
func checkNodeClaims(t *testing.T, node string, want []types.UID) {
	t.Helper()
	cdiDir := pluginHostPath(t, node, "--cdi-root")
	testutil.Eventually(t, time.Minute, "the CDI specs and checkpoint on "+node+" holding exactly the live claims", func() (bool, error) {
		cp, err := checkpoint(t, node)
		if err != nil {
			return false, err
		}
		wantSet := map[types.UID]bool{}
		for _, uid := range want {
			wantSet[uid] = true
		}
		var extra []string
		for uid, e := range cp.Claims {
			if e.State == kubeletplugin.PrepareAborted {
				continue
			}
			if e.Kind == string(kubeletplugin.KindDaemon) && !wantSet[uid] {
				wantSet[uid] = true // the daemon's claim, when want does not name it
			}
			if !wantSet[uid] {
				extra = append(extra, fmt.Sprintf("%s %s/%s %s", uid, e.Namespace, e.Name, e.State))
			} else if e.State != kubeletplugin.PrepareCompleted {
				return false, fmt.Errorf("claim %s is %s", uid, e.State)
			}
		}
		for uid := range wantSet {
			if _, ok := cp.Claims[uid]; !ok {
				return false, fmt.Errorf("claim %s not in the checkpoint", uid)
			}
		}
		if len(extra) > 0 {
			return false, fmt.Errorf("checkpoint holds other claims: %v", extra)
		}
		var specs, wantSpecs []string
		entries, err := os.ReadDir(cdiDir)
		if err != nil {
			return false, err
		}
		for _, e := range entries {
			specs = append(specs, e.Name())
		}
		for uid := range wantSet {
			wantSpecs = append(wantSpecs, filepath.Base(cdiSpecPath(t, node, uid)))
		}
		sort.Strings(specs)
		sort.Strings(wantSpecs)
		if strings.Join(specs, ",") != strings.Join(wantSpecs, ",") {
			return false, fmt.Errorf("CDI specs %v in %s, want %v", specs, cdiDir, wantSpecs)
		}
		return true, nil
	})
}

func ptrTo(p corev1.Pod) *corev1.Pod { return &p }
