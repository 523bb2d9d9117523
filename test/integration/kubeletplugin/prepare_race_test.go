package kubeletplugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	resourcev1 "k8s.io/api/resource/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin"
)

// prepareAsync calls NodePrepareResources for one claim from another goroutine and delivers its
// answer (or the call's error) on the returned channel.
func (n *node) prepareAsync(claim *resourcev1.ResourceClaim) <-chan *drapbv1.NodePrepareResourceResponse {
	out := make(chan *drapbv1.NodePrepareResourceResponse, 1)
	dra := n.dra
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		resp, err := dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{
			{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)},
		}})
		switch {
		case err != nil:
			out <- &drapbv1.NodePrepareResourceResponse{Error: "call failed: " + err.Error()}
		case resp.Claims[string(claim.UID)] == nil:
			out <- &drapbv1.NodePrepareResourceResponse{Error: "no answer for the claim"}
		default:
			out <- resp.Claims[string(claim.UID)]
		}
	}()
	return out
}

// TestPrepareRacingUnprepareDoesNotCompleteAfterIt: a channel prepare waits for its daemon; an
// unprepare of the same claim comes meanwhile (a retried call, a plugin restart: the kubelet's
// own ordering is not enough), and the daemon turns Ready right after it. Once both calls have
// answered, the claim has no CDI spec, no checkpoint entry and no node label left, and the
// prepare failed: a prepare never completes after an unprepare of its claim.
func TestPrepareRacingUnprepareDoesNotCompleteAfterIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.addNode(11)
	// A long readiness wait: the prepare is still waiting when the unprepare comes.
	n.startWith(4, testr.NewWithOptions(t, testr.Options{Verbosity: 1}), func(o *kubeletplugin.Options) { o.ReadyWaitTimeout = 2 * time.Minute })
	cd := e.createCD(e.ns, "race")
	e.setClique(cd, n, cdv1beta1.StatusNotReady)
	claim := e.channelClaim(e.ns, "race", n, cd, "")

	prepared := n.prepareAsync(claim)
	e.Eventually(time.Minute, "the prepare waiting for the daemon (PrepareStarted, node labelled)", func() (bool, error) {
		return n.checkpoint().Claims[claim.UID].State == kubeletplugin.PrepareStarted && n.label() == string(cd.UID), nil
	})

	if msg := n.unprepare(claim.Namespace, claim.Name, claim.UID); msg != "" {
		t.Fatalf("unprepare while a prepare of the claim waits: %s", msg)
	}
	// The daemon turns Ready after the unprepare: a prepare still waiting would now complete.
	e.setClique(cd, n, cdv1beta1.StatusReady)
	got := <-prepared

	if got.Error == "" || !strings.Contains(got.Error, "unprepared") {
		t.Errorf("prepare answered %v (error %q), want an error saying the claim was unprepared meanwhile", got.Devices, got.Error)
	}
	if _, ok := n.cdiSpec(claim.UID); ok {
		t.Error("CDI spec of the claim left after its unprepare")
	}
	if entry, ok := n.checkpoint().Claims[claim.UID]; ok {
		t.Errorf("checkpoint entry %+v left after the unprepare", entry)
	}
	if l := n.label(); l != "" {
		t.Errorf("node label %q left after the domain's only claim was unprepared", l)
	}

	// The kubelet may prepare the claim again (another pod on the node uses it): that works.
	got, _ = n.prepare(claim)
	if got.Error != "" {
		t.Fatalf("prepare after the unprepare: %s", got.Error)
	}
	if _, ok := n.cdiSpec(claim.UID); !ok {
		t.Error("no CDI spec after preparing the claim again")
	}
}
