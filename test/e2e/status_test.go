package e2e

import (
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/sim/nodehost"
	"cdplane/internal/status"
	"cdplane/internal/testutil"
)

// TestStatusShowsWhyANodeHoldsTheDomainBack: on one node of a driver-managed plane the
// administrator's nvidia-imex host service runs and holds the node's IMEX session. A domain
// whose workload lands there and on a second node of the rack cannot be Ready: that node's
// daemon gets NV_ERR_IN_USE. `cdplane status -n NS NAME` (the built CLI, as an operator runs it)
// names the node and the reason, in text and in JSON; the domain has a NodesBlocked condition
// and Kubernetes events for the nodes that joined and the node blocked.
func TestStatusShowsWhyANodeHoldsTheDomainBack(t *testing.T) {
	e2eOnly(t)
	waitPlanesIdle(t, planeA)
	racks := planeRacks(t, planeA)
	nodes := planeNodes(planeA, rackNumber(t, racks[0]))[:2]
	blocked := nodes[1]
	var self netip.Addr
	for _, n := range simState.Nodes {
		if n.Name == blocked {
			self = netip.MustParseAddr(n.InternalIP)
		}
	}
	stop, err := nodehost.StartHostIMEX(filepath.Join(stateDir, "nodes", blocked), self, nil, testr.New(t).WithValues("hostIMEX", blocked))
	must(t, err)
	t.Cleanup(func() { _ = stop(ctx()) })

	ns := namespace(t, planeA)
	cd := computeDomain(t, ns, "cd", 2, "")
	for i, n := range nodes {
		workerPod(t, ns, []string{"w0", "w1"}[i], "cd", n)
	}
	var d status.Domain
	testutil.Eventually(t, 3*time.Minute, "cdplane status naming "+blocked+" as held back by the host's IMEX", func() (bool, error) {
		out, err := cdplaneStdout("status", "-n", ns, cd.Name, "-o", "json")
		if err != nil {
			return false, err
		}
		d = status.Domain{}
		if err := json.Unmarshal(out, &d); err != nil {
			return false, err
		}
		for _, h := range d.HeldBack {
			if h.Node == blocked && h.Reason == status.ReasonHostIMEXInUse {
				return true, nil
			}
		}
		return false, nil
	})
	if d.Status == cdv1beta1.StatusReady {
		t.Errorf("domain %s Ready while %s is held back", cd.Name, blocked)
	}
	text, err := cdplaneStdout("status", "-n", ns, cd.Name)
	must(t, err)
	t.Logf("cdplane status -n %s %s:\n%s", ns, cd.Name, text)
	if !strings.Contains(string(text), blocked) || !strings.Contains(string(text), status.ReasonHostIMEXInUse) {
		t.Errorf("the text view does not name %s and %s", blocked, status.ReasonHostIMEXInUse)
	}
	testutil.Eventually(t, time.Minute, "the NodesBlocked condition naming "+blocked, func() (bool, error) {
		for _, c := range getCD(t, cd).Status.Conditions {
			if c.Type == cdv1beta1.ConditionNodesBlocked && c.Status == "True" && strings.Contains(c.Message, blocked) {
				return true, nil
			}
		}
		return false, nil
	})
	testutil.Eventually(t, time.Minute, "events NodesJoined and NodesBlocked on the domain", func() (bool, error) {
		evs := &eventsv1.EventList{}
		if err := c.List(ctx(), evs, client.InNamespace(ns)); err != nil {
			return false, err
		}
		seen := map[string]bool{}
		for _, e := range evs.Items {
			if e.Regarding.Kind == "ComputeDomain" && e.Regarding.Name == cd.Name {
				seen[e.Reason] = true
				if e.Reason == "NodesBlocked" && !strings.Contains(e.Note, blocked) {
					t.Errorf("NodesBlocked event does not name %s: %s", blocked, e.Note)
				}
			}
		}
		return seen["NodesJoined"] && seen["NodesBlocked"], nil
	})
}

// cdplaneStdout runs the sim's cdplane binary against the simulated cluster and returns its
// standard output alone (JSON for scripts), with standard error in the error.
func cdplaneStdout(args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx(), filepath.Join(simState.BinDir, "cdplane"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+simState.ControlPlane.Kubeconfig)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, &cliError{err: err, stderr: stderr.String()}
	}
	return out, nil
}

type cliError struct {
	err    error
	stderr string
}

func (e *cliError) Error() string { return e.err.Error() + ": " + strings.TrimSpace(e.stderr) }
