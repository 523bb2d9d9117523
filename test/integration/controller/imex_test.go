package controller

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/daemon"
	"cdplane/internal/imex"
	"cdplane/internal/sim/imexsim"
	"cdplane/internal/sim/nodehost"
	"cdplane/internal/testutil"
)

// TestHostIMEXHoldsTheNodesSession: a node runs NVIDIA's nvidia-imex.service, which holds the
// node's one IMEX session, so the daemon's IMEX fails with NV_ERR_IN_USE. The daemon does not
// retry: its readiness check says why, its pod carries the reason, an event regarding the pod
// names the node, and the domain's NodesBlocked condition names the node; the other node of
// the domain is unaffected and the host service keeps running. (Before, the daemon restarted
// IMEX with backoff for ever and nothing outside its log said why.)
func TestHostIMEXHoldsTheNodesSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	cd := e.createCD("hostimex", 2)
	blockedNode, fine := e.addNode(cd, "h1"), e.addNode(cd, "h2")
	dir, err := e.nodeDir(blockedNode)
	if err != nil {
		t.Fatal(err)
	}
	stopHost, err := nodehost.StartHostIMEX(dir, netip.MustParseAddr(loopbackIP()), nil, testr.New(t).WithName("host-imex"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stopHost(context.Background()) })
	hostReady := func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return imexsim.ReadyUnix(ctx, filepath.Join(dir, nodehost.HostIMEXSocketPath)) == nil, nil
	}
	e.eventually(2*time.Minute, "the host IMEX is READY: it holds the node's session", hostReady)

	// The kubelet plugin finds the enabled service's unit link in the node's driver root and
	// tells the daemon (NVIDIA_HOST_IMEX_SERVICE): the session's holder is known, no retry.
	d, err := e.tryStartDaemonWith(cd, blockedNode, testClique, func(n *node) { n.hostIMEXService = nodehost.HostIMEXUnitLink })
	if err != nil {
		t.Fatal(err)
	}
	e.startDaemon(cd, fine, testClique)

	var cond metav1.Condition
	e.eventually(2*time.Minute, "NodesBlocked names the node", func() (bool, error) {
		c := meta.FindStatusCondition(e.getCD(cd).Status.Conditions, cdv1beta1.ConditionNodesBlocked)
		if c == nil {
			return false, nil
		}
		cond = *c
		return c.Status == metav1.ConditionTrue && c.Reason == cdv1beta1.ReasonHostIMEXInUse && strings.Contains(c.Message, blockedNode), nil
	})
	if !strings.Contains(cond.Message, "systemctl disable --now nvidia-imex") || strings.Contains(cond.Message, fine) {
		t.Errorf("NodesBlocked message %q: want the fix, and only %s", cond.Message, blockedNode)
	}
	pod := &corev1.Pod{}
	if err := e.c.Get(e.ctx(), client.ObjectKeyFromObject(d.pod), pod); err != nil {
		t.Fatal(err)
	}
	if got := pod.Labels[cdv1beta1.IMEXBlockedLabel]; got != cdv1beta1.IMEXBlockedHostIMEXInUse {
		t.Errorf("pod label %s=%q, want %q", cdv1beta1.IMEXBlockedLabel, got, cdv1beta1.IMEXBlockedHostIMEXInUse)
	}
	checkCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := daemon.Check(checkCtx, d.config(), d.imex); err == nil || !strings.Contains(err.Error(), "HostIMEXInUse") ||
		!strings.Contains(err.Error(), imex.SessionInUseCode) {
		t.Errorf("readiness check: %v, want the reason", err)
	}
	events := &eventsv1.EventList{}
	if err := e.c.List(e.ctx(), events, client.InNamespace(e.driverNS)); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, ev := range events.Items {
		if ev.Reason == cdv1beta1.IMEXBlockedHostIMEXInUse && ev.Regarding.Name == d.pod.Name && ev.Type == corev1.EventTypeWarning &&
			ev.Related != nil && ev.Related.Kind == "Node" && ev.Related.Name == blockedNode {
			found = true
		}
	}
	if !found {
		t.Errorf("no Warning event %s regarding pod %s with node %s related; events: %+v", cdv1beta1.IMEXBlockedHostIMEXInUse, d.pod.Name, blockedNode, events.Items)
	}

	// No retries: with a 100 ms restart backoff a retrying daemon would have started IMEX
	// many times over by now.
	testutil.Consistently(t, 2*time.Second, "IMEX started once on the blocked node", func() (bool, error) {
		if n := d.starts.count.Load(); n != 1 {
			return false, fmt.Errorf("started %d times", n)
		}
		return true, nil
	})
	if ok, _ := hostReady(); !ok {
		t.Error("the host IMEX is no longer READY")
	}
}

// TestFailedFabricIsReported: a node whose NVLink fabric registration failed (the kubelet plugin
// serves it as one without a fabric and tells its daemon why) joins the domain as a fabric-less
// node, Ready, and the domain's NodesBlocked condition names it with reason FabricError.
func TestFailedFabricIsReported(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	cd := e.createCD("fabricerror", 2)
	broken, fine := e.addNode(cd, "fe1"), e.addNode(cd, "fe2")
	n, err := e.tryStartDaemonWith(cd, broken, "", func(n *node) {
		n.fabricError = "NVLink fabric registration failed: state COMPLETED, status ERROR_UNKNOWN"
	})
	if err != nil {
		t.Fatal(err)
	}
	e.startDaemon(cd, fine, testClique)
	e.waitStatus(cd, cdv1beta1.StatusReady, 30*time.Second)
	e.eventually(2*time.Minute, "NodesBlocked names the node with the failed fabric", func() (bool, error) {
		c := meta.FindStatusCondition(e.getCD(cd).Status.Conditions, cdv1beta1.ConditionNodesBlocked)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == cdv1beta1.ReasonFabricError &&
			strings.Contains(c.Message, broken) && !strings.Contains(c.Message, fine), nil
	})
	pod := &corev1.Pod{}
	if err := e.c.Get(e.ctx(), client.ObjectKeyFromObject(n.pod), pod); err != nil {
		t.Fatal(err)
	}
	if got := pod.Labels[cdv1beta1.IMEXBlockedLabel]; got != cdv1beta1.IMEXBlockedFabricError {
		t.Errorf("pod label %s=%q, want %q", cdv1beta1.IMEXBlockedLabel, got, cdv1beta1.IMEXBlockedFabricError)
	}
}

// TestNoIMEXNameReachesDNS: a domain of three nodes in a clique of 18 slots, each daemon's
// simulated IMEX resolving through a cluster pod's resolv.conf. Every name of the node list
// resolves from the hosts file (members to their addresses, the 15 empty slots to their
// sentinels), so no simulated DNS lookup happens, at start or on the resolver's retries. A daemon
// that mapped only the members (as NVIDIA's does) would make 4 lookups per empty slot at start
// and again every few seconds (test/realimex checks that count). Gone daemons are not left
// mapped: force-deleting one maps its slot to its sentinel on the others.
func TestNoIMEXNameReachesDNS(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	// What the simulated kubelet renders for the controller's daemon pods (ndots:1 from the
	// template's dnsConfig).
	if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.10\nsearch "+e.driverNS+".svc.cluster.local svc.cluster.local cluster.local\noptions ndots:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.daemonEnv = []string{imexsim.ResolvConfEnv + "=" + resolv}
	cd := e.createCD("nodns", 3)
	var daemons []*node
	for i := range 3 {
		daemons = append(daemons, e.startDaemon(cd, e.addNode(cd, fmt.Sprintf("d%d", i)), testClique))
	}
	before := e.waitStatus(cd, cdv1beta1.StatusReady, 30*time.Second)
	// For one resolver retry interval and more: unresolved names would be looked up again within it.
	testutil.Consistently(t, imexsim.DefaultDNSRetryInterval+time.Second, "no simulated DNS lookups, nothing unresolved", func() (bool, error) {
		for _, d := range daemons {
			st, err := d.status()
			if err != nil {
				return false, err
			}
			if st.DNSLookups != 0 || len(st.Unresolved) != 0 {
				return false, fmt.Errorf("%s: %d simulated DNS lookups, unresolved %v", d.name, st.DNSLookups, st.Unresolved)
			}
		}
		return true, nil
	})

	victim := daemons[2]
	old, _ := entryOf(before, victim.name)
	victim.forceDeletePod()
	settings := imex.Settings{DomainUID: string(cd.UID)}
	want := imex.SentinelAddr(old.Index).String() + "\t" + settings.Name(old.Index) + "\n"
	for _, d := range daemons[:2] {
		e.eventually(2*time.Minute, d.name+" maps the gone daemon's name to its sentinel", func() (bool, error) {
			hosts, err := os.ReadFile(d.config().HostsPath)
			return err == nil && strings.Contains(string(hosts), want) && !strings.Contains(string(hosts), old.IPAddress+"\t"), err
		})
	}
}
